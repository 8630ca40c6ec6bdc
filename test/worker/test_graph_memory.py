"""CPU: budget auto's verify graphs are captured bucket by bucket (``widths.VerifyWidths``); a bucket whose graphs
are predicted not to fit in the free GPU memory stops the start with one line that says what to change, before
the capture runs out of memory (auto is the default on dense targets since session 44)."""

import types

import pytest

from sglang_ddtree.config import DDTreeConfig
from sglang_ddtree.worker import widths

# session 44, the Qwen3-8B shape on an H100: GB per verify width of auto's buckets
MEASURED_8B = {1: 0.11, 2: 0.15, 4: 0.27, 8: 0.44, 16: 0.98, 32: 1.87}


def test_the_prediction_scales_the_widest_measured_graphs_by_width():
    assert widths.graph_memory_short(2, {}, 0.0) is None  # nothing measured yet: no prediction
    assert widths.graph_memory_short(32, {16: 0.98, 8: 0.44}, 1.57) is None  # 0.8 x 1.96 = 1.568 fits
    assert widths.graph_memory_short(32, {16: 0.98, 8: 0.44}, 1.5) == pytest.approx(1.96)
    assert widths.graph_memory_short(4, {2: -0.01}, 0.0) is None  # a measurement below zero (noise) predicts 0
    # each step of session 44's capture, from the one before: predicted 0.85-1.5x what it took, so the guard refuses
    # none that would leave a quarter of its own size free, and every one that does not fit at all
    steps = sorted(MEASURED_8B)
    for prev, width in zip(steps, steps[1:]):
        need = MEASURED_8B[prev] * width / prev
        assert 0.85 <= need / MEASURED_8B[width] <= 1.5
        assert widths.graph_memory_short(width, {prev: MEASURED_8B[prev]}, 1.25 * MEASURED_8B[width]) is None
        assert widths.graph_memory_short(width, {prev: MEASURED_8B[prev]}, 0.7 * MEASURED_8B[width]) is not None


class _Memory:
    """Free GPU memory that each fake graph capture takes its width's share of."""

    def __init__(self, free_gb):
        self.free = free_gb
        self.captured = []

    def available(self, *args, **kwargs):
        return self.free

    def runner(self, model_runner, attn_backend=None, speculative_num_draft_tokens=None):
        self.captured.append(speculative_num_draft_tokens)
        self.free -= MEASURED_8B[speculative_num_draft_tokens]
        return types.SimpleNamespace(width=speculative_num_draft_tokens)


def _verify_widths(monkeypatch, free_gb):
    import sglang.srt.model_executor.runner.decode_cuda_graph_runner as dcgr
    import sglang.srt.utils as sg_utils

    memory = _Memory(free_gb)
    monkeypatch.setattr(sg_utils, "get_available_gpu_memory", memory.available)
    monkeypatch.setattr(dcgr, "DecodeCudaGraphRunner", memory.runner)
    monkeypatch.setattr(widths, "_set_fields", lambda sa, **f: [setattr(sa, k, v) for k, v in f.items()])
    args = types.SimpleNamespace(speculative_num_draft_tokens=64, speculative_eagle_topk=8, mem_fraction_static=0.83)
    mr = types.SimpleNamespace(attn_backend="own", decode_cuda_graph_runner="main", device="cuda", gpu_id=0,
                               _get_attention_backend=lambda init_new_workspace=False: object())
    config = DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True)
    return memory, lambda: widths.VerifyWidths(mr, args, config, capture_graphs=True)


def test_every_bucket_is_captured_where_memory_suffices(monkeypatch):
    memory, build = _verify_widths(monkeypatch, free_gb=5.0)  # session 44's default start had 5.2 GB before them
    vw = build()
    assert memory.captured == [1, 2, 4, 8, 16, 32]
    assert vw.graph_mem_gb == {b: pytest.approx(MEASURED_8B[b + 1]) for b in (0, 1, 3, 7, 15, 31)}


def test_a_bucket_that_cannot_fit_stops_the_start_with_one_line(monkeypatch):
    memory, build = _verify_widths(monkeypatch, free_gb=2.2)  # 1.99 GB used by widths 1-16, 0.21 left for 32's
    with pytest.raises(RuntimeError) as e:
        build()
    assert memory.captured == [1, 2, 4, 8, 16]  # width 32 was never started
    message = str(e.value)
    assert "\n" not in message and message.startswith("DDTREE budget auto: the verify CUDA graphs of width 32 need about")
    assert "--mem-fraction-static (now 0.83)" in message and "--speculative-ddtree-budget" in message


def test_without_graph_capture_nothing_is_predicted(monkeypatch):
    memory, build = _verify_widths(monkeypatch, free_gb=0.0)
    import sglang.srt.model_executor.runner.decode_cuda_graph_runner as dcgr

    monkeypatch.setattr(dcgr, "DecodeCudaGraphRunner", lambda *a, **k: pytest.fail("no capture without graphs"))
    mr = types.SimpleNamespace(attn_backend="own", decode_cuda_graph_runner=None, device="cuda", gpu_id=0,
                               _get_attention_backend=lambda init_new_workspace=False: object())
    args = types.SimpleNamespace(speculative_num_draft_tokens=64, speculative_eagle_topk=8)
    vw = widths.VerifyWidths(mr, args, DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True),
                             capture_graphs=True)
    assert all(runner is None for _, runner in vw.sets.values() if runner != "main")
