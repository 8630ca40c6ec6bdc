"""CPU: ``worker.prefill`` (SGLANG_DDTREE_PREFILL_ASYNC=1, the 0.5.16 family) does what upstream DFLASH's 0.5.16
prefill does, call for call, on fakes: the same target call, the same draft-KV write (positions included), the same
draft state, the hidden states dropped; only its two length copies are enqueued instead of waited for (a host wait
that cannot show on a CPU: the GPU run is what says it is gone)."""

import types

import pytest
import torch

from sglang_ddtree.compat import adapter
from sglang_ddtree.worker import prefill


class _Worker:
    """What a prefill touches on the DDTREE worker, recording every call."""

    def __init__(self):
        self.calls = []
        self.hidden = torch.randn(7, 4)
        self.out = types.SimpleNamespace(logits_output=types.SimpleNamespace(hidden_states=self.hidden),
                                         next_token_ids=torch.tensor([11, 12]))
        self.model_runner = types.SimpleNamespace(server_args=types.SimpleNamespace(attention_backend="torch_native"))
        self.target_worker = types.SimpleNamespace(forward_batch_generation=self._target)
        self._draft_kv_graphs = None  # DDTREE's draft-KV graphs (draft_kv_graph); upstream's worker has none

    def _target(self, batch, **kwargs):
        self.calls.append(("target", batch, kwargs))
        return self.out

    def _validate_phase1_sampling_support(self, batch):
        self.calls.append(("validate", batch))

    def _append_target_hidden_to_draft_kv_by_loc(self, **kwargs):
        self.calls.append(("append", kwargs))

    def _make_next_draft_input_prefill(self, **kwargs):
        self.calls.append(("draft_input", kwargs))
        return "next-draft-input"


def _batch(extend_lens=(3, 4), prefix_lens=(5, 0)):
    mode = types.SimpleNamespace(is_extend=lambda: True, is_idle=lambda: False)
    n = sum(extend_lens)
    return types.SimpleNamespace(forward_mode=mode, is_extend_in_batch=False, return_logprob=False,
                                 extend_lens=list(extend_lens), prefix_lens=list(prefix_lens),
                                 out_cache_loc=torch.arange(100, 100 + n),
                                 seq_lens=torch.tensor([a + b for a, b in zip(extend_lens, prefix_lens)]))


def _run(path):
    worker, batch, published = _Worker(), _batch(), []
    out = path(worker, batch, published.append)
    calls = []
    for call in worker.calls:
        if call[0] == "append":
            kw = call[1]
            assert kw["target_hidden"] is worker.hidden and kw["cache_loc"] is batch.out_cache_loc
            calls.append(("append", kw["positions"].tolist(), sorted(kw)))
        elif call[0] == "draft_input":
            assert call[1]["bonus_tokens"] is worker.out.next_token_ids and call[1]["seq_lens"] is batch.seq_lens
            calls.append(("draft_input", sorted(call[1])))
        else:
            assert call[1] is batch
            calls.append(call[:1] + call[2:])
    assert published == [batch.seq_lens] and out.new_seq_lens is batch.seq_lens
    assert out.logits_output.hidden_states is None and out.next_draft_input == "next-draft-input"
    return calls


def test_the_prefill_does_what_upstreams_does():
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    ours = _run(prefill.prefill)
    assert ours == [("validate",), ("target", {"capture_hidden_mode": CaptureHiddenMode.FULL}),
                    ("append", [5, 6, 7, 0, 1, 2, 3], ["cache_loc", "positions", "target_hidden"]),
                    ("draft_input", ["bonus_tokens", "seq_lens"])]
    if adapter().own_prefill:  # upstream's prefill is 0.5.16's: the very same calls
        from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

        assert _run(DFlashWorkerV2.forward_batch_generation) == ours


def test_missing_hidden_states_or_lengths_fail_in_one_line():
    worker, batch = _Worker(), _batch()
    worker.out.logits_output.hidden_states = None
    with pytest.raises(RuntimeError, match="^DDTREE prefill: the target captured no hidden states"):
        prefill.prefill(worker, batch)
    worker, batch = _Worker(), _batch()
    batch.prefix_lens = None
    with pytest.raises(RuntimeError, match="^DDTREE prefill: the extend batch has no extend_lens"):
        prefill.prefill(worker, batch)


def test_lens_to_device():
    t = prefill.lens_to_device([3, 0, 9], "cpu")
    assert t.dtype == torch.int32 and t.tolist() == [3, 0, 9] and t.device.type == "cpu"


def test_the_switch_and_the_adapter(monkeypatch):
    import sglang_ddtree.worker.prefill as mod

    monkeypatch.delenv(prefill.ENV, raising=False)
    assert not prefill.enabled()  # off by default
    monkeypatch.setenv(prefill.ENV, "1")
    monkeypatch.setattr(mod, "adapter", lambda: types.SimpleNamespace(own_prefill=True))
    assert prefill.enabled()
    monkeypatch.setattr(mod, "adapter", lambda: types.SimpleNamespace(own_prefill=False))
    assert not prefill.enabled()  # a later family keeps upstream's prefill
    monkeypatch.setenv(prefill.ENV, "yes")
    with pytest.raises(ValueError, match="SGLANG_DDTREE_PREFILL_ASYNC='yes': use 1"):
        prefill.enabled()


def test_only_the_0_5_16_family_stands_in_for_upstreams_prefill():
    from sglang_ddtree.compat import sglang_0_5_16, sglang_0_5_17, sglang_0_5_23

    assert sglang_0_5_16.Adapter.own_prefill and not sglang_0_5_17.Adapter.own_prefill
    assert not sglang_0_5_23.Adapter.own_prefill


def test_the_worker_runs_it_for_extend_batches_when_on(monkeypatch):
    from sglang_ddtree.worker import worker as worker_mod

    seen = []
    monkeypatch.setattr(prefill, "prefill", lambda w, b, p=None: seen.append((w, b, p)) or "ours")
    fake = types.SimpleNamespace(_auto=None, _own_prefill=True)
    batch = _batch()
    assert worker_mod.DDTreeWorker.forward_batch_generation(fake, batch, "pub") == "ours"
    assert seen == [(fake, batch, "pub")]


class _Graphs:
    """The draft-KV graphs' ``append_root``, recorded."""

    def __init__(self):
        self.calls = []

    def append_root(self, hidden, loc, positions, commit_lens):
        self.calls.append((hidden, loc, positions.tolist(), commit_lens))


def test_a_prefill_of_one_token_per_request_appends_from_the_draft_kv_graphs():
    """Every request extends by 1 token (the radix cache held its prompt but the last): the width-0 round's graphs
    append the one row per request (every commit length 1: ``None``), at the prompt's last position; upstream's
    eager append does not run."""
    worker, batch = _Worker(), _batch(extend_lens=(1, 1, 1), prefix_lens=(5, 0, 12))
    worker.hidden = worker.out.logits_output.hidden_states = torch.randn(3, 4)
    worker._draft_kv_graphs = graphs = _Graphs()
    out = prefill.prefill(worker, batch)
    assert [c[0] for c in worker.calls] == ["validate", "target", "draft_input"]  # no eager append
    assert len(graphs.calls) == 1
    hidden, loc, positions, lens = graphs.calls[0]
    assert hidden is worker.hidden and loc is batch.out_cache_loc and positions == [5, 0, 12] and lens is None
    assert out.logits_output.hidden_states is None


def test_a_prefill_of_more_tokens_keeps_upstreams_eager_append():
    """A request with more than 1 new token (or no draft-KV graphs): upstream's eager append of every token."""
    for extend_lens, prefix_lens, graphs in (((1, 2), (5, 0), _Graphs()), ((1, 1), (5, 0), None)):
        worker, batch = _Worker(), _batch(extend_lens=extend_lens, prefix_lens=prefix_lens)
        worker._draft_kv_graphs = graphs
        prefill.prefill(worker, batch)
        appends = [c[1] for c in worker.calls if c[0] == "append"]
        assert len(appends) == 1 and appends[0]["cache_loc"] is batch.out_cache_loc
        assert graphs is None or graphs.calls == []
