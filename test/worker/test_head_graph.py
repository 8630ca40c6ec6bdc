"""The tree head as CUDA graphs (``worker.head_graph``, on unless ``SGLANG_DDTREE_HEAD_GRAPH=0``): the switch, where
the worker builds the heads and where it says why it does not. The heads' rounds themselves: ``test_round_cpu.py``
(the round with the heads' static buffers, run eagerly), ``test_head_graph_gpu.py`` (captured against eager, on a
GPU)."""

import logging
from types import SimpleNamespace

import pytest
import torch

from sglang_ddtree.config import ChainBucket, DDTreeConfig


def test_the_switch(monkeypatch):
    from sglang_ddtree.worker import head_graph

    # on by default since session 41; only an explicit 1 is a request (a config without heads then warns)
    for value, want, asked in (("", True, False), (" ", True, False), ("0", False, False), ("1", True, True)):
        monkeypatch.setenv(head_graph.ENV, value)
        assert head_graph.enabled() is want and head_graph.requested() is asked
    monkeypatch.delenv(head_graph.ENV)
    assert head_graph.enabled() and not head_graph.requested()
    monkeypatch.setenv(head_graph.ENV, "on")
    with pytest.raises(ValueError, match="SGLANG_DDTREE_HEAD_GRAPH='on': use 1 .* or 0"):
        head_graph.enabled()


def test_tree_heads_refuse_what_they_cannot_hold():
    from sglang_ddtree.worker import head_graph

    kw = dict(depth=7, topk=4, device="cpu", req_to_token=torch.zeros(4, 8, dtype=torch.int32), mask_capacity=10,
              slots=None, bits_for=lambda tree, b: None, capture=False)
    for batch_sizes, budgets in (((), (15,)), ((1, 2), ()), ((1, 2), (0, 15))):
        with pytest.raises(ValueError, match="TreeHeads needs batch sizes, budgets >= 1"):
            head_graph.TreeHeads(batch_sizes=batch_sizes, budgets=budgets, **kw)


def _worker(monkeypatch, config, *, bits=True, graphs=(1, 2, 4), tp=1, hybrid=False, auto=True):
    from sglang_ddtree.worker import head_graph, widths
    from sglang_ddtree.worker import worker as worker_mod

    built = []
    monkeypatch.setattr(head_graph, "TreeHeads", lambda **kw: built.append(kw) or SimpleNamespace(
        describe=lambda: "described"))
    monkeypatch.setattr(widths, "captured_graphs", lambda runner: {b: object() for b in runner.capture_bs})
    monkeypatch.setattr(worker_mod, "get_tp_group", lambda: SimpleNamespace(rank_in_group=0, world_size=tp))
    w = worker_mod.DDTreeWorker.__new__(worker_mod.DDTreeWorker)
    w.config, w.device, w._hybrid, w._fa3_tree_bits = config, "cpu", hybrid, bits
    mr = SimpleNamespace(decode_cuda_graph_runner=SimpleNamespace(capture_bs=list(graphs)), max_total_num_tokens=4096,
                         req_to_token_pool=SimpleNamespace(req_to_token=torch.zeros(4, 8, dtype=torch.int32)))
    w._target_worker = SimpleNamespace(model_runner=mr)
    w._widths = SimpleNamespace(active=object()) if auto else None
    return w, built


def test_the_worker_builds_heads_for_the_tree_buckets(monkeypatch, caplog):
    from sglang_ddtree.worker import worker as worker_mod

    config = DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True, chain=True)
    w, built = _worker(monkeypatch, config)
    with caplog.at_level(logging.INFO, logger=worker_mod.logger.name):
        assert w._init_heads() is not None
    (kw,) = built
    # the tree buckets only: width 0 and the chain keep their constant structure
    assert kw["budgets"] == [1, 3, 7, 15, 31, 63] and ChainBucket(15) in config.buckets
    assert kw["batch_sizes"] == [1, 2, 4] and kw["mask_capacity"] == 4096 and kw["depth"] == 15 and kw["topk"] == 8
    assert kw["slots"] is worker_mod.assign_extend_cache_locs_func and kw["backend_for"] is w._widths.active
    assert "DDTREE tree head graphs (SGLANG_DDTREE_HEAD_GRAPH=0 turns them off): described" in caplog.text
    w, built = _worker(monkeypatch, DDTreeConfig(budget=64, topk=8, block_size=16), auto=False)  # a fixed budget
    assert w._init_heads() is not None and built[0]["budgets"] == [64] and built[0]["backend_for"] is None
    # a fixed budget below the block's 15 positions: the draft still hands over [bs, 15, K] (session 42 on an H100:
    # budget 7 sized the inputs by its depth, 7, and the first round's copy failed)
    w, built = _worker(monkeypatch, DDTreeConfig(budget=7, topk=7, block_size=16), auto=False)
    assert w._init_heads() is not None and built[0]["budgets"] == [7]
    assert built[0]["depth"] == 15 == w.config.draft_positions and w.config.max_depth == 7


@pytest.mark.parametrize("why,kw", [
    ("the target verifies without DDTREE's fused tree attention on fa3", dict(bits=False)),
    ("no verify CUDA graphs", dict(graphs=())),
    ("tp > 1", dict(tp=2)),
    ("a hybrid target", dict(hybrid=True)),
])
def test_the_worker_says_why_the_head_stays_eager(monkeypatch, caplog, why, kw):
    from sglang_ddtree.worker import head_graph
    from sglang_ddtree.worker import worker as worker_mod

    # asked for with SGLANG_DDTREE_HEAD_GRAPH=1: a warning
    monkeypatch.setenv(head_graph.ENV, "1")
    w, built = _worker(monkeypatch, DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True), **kw)
    with caplog.at_level(logging.WARNING, logger=worker_mod.logger.name):
        assert w._init_heads() is None
    assert not built
    assert f"DDTREE: SGLANG_DDTREE_HEAD_GRAPH=1 but the tree head runs eagerly: {why}." in caplog.text
    # the default: one INFO line, no warning (triton, hybrid and tp 2 servers are not misconfigured)
    caplog.clear()
    monkeypatch.delenv(head_graph.ENV)
    with caplog.at_level(logging.INFO, logger=worker_mod.logger.name):
        assert w._init_heads() is None
    assert not built
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert f"DDTREE: the tree head runs eagerly (no head graphs): {why}." in caplog.text


def test_init_cuda_graphs_builds_heads_unless_switched_off(monkeypatch):
    from sglang_ddtree.worker import head_graph, warmup
    from sglang_ddtree.worker import worker as worker_mod

    calls = []
    monkeypatch.setattr(worker_mod.DFlashWorkerV2, "init_cuda_graphs", lambda self: None)
    monkeypatch.setattr(worker_mod, "adapter", lambda: SimpleNamespace(drafter_widths=lambda config: _null()))
    monkeypatch.setattr(worker_mod.DDTreeWorker, "_init_draft_kv_graphs", lambda self: None)
    monkeypatch.setattr(warmup, "enabled", lambda: False)
    monkeypatch.setattr(worker_mod.DDTreeWorker, "_init_heads", lambda self: calls.append(1) or "heads")
    w = worker_mod.DDTreeWorker.__new__(worker_mod.DDTreeWorker)
    w.config, w._heads = DDTreeConfig(budget=15, topk=4, block_size=8), None
    monkeypatch.setenv(head_graph.ENV, "0")
    w.init_cuda_graphs()
    assert calls == [] and w._heads is None
    monkeypatch.delenv(head_graph.ENV, raising=False)  # the default
    w.init_cuda_graphs()
    assert calls == [1] and w._heads == "heads"


def _null():
    import contextlib

    return contextlib.nullcontext()
