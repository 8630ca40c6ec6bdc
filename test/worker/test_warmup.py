"""``worker.warmup.warm_round_kernels`` on CPU (the PyTorch paths of the same entry points): it runs every
eager step of the round once per bucket, at that bucket's verify width, with the round's dtypes, and the slot
kernel's batch-size classes. Whether the Triton specialisations it compiles are the round's is the GPU test's
(``test_warmup_gpu.py``)."""

import pytest
import torch

from sglang_ddtree.config import DDTreeConfig
from sglang_ddtree.worker import warmup


def test_pow2_classes():
    assert warmup._pow2_classes(1) == [1]
    assert warmup._pow2_classes(48) == [1, 2, 4, 8, 16, 32, 64]
    assert warmup._pow2_classes(64) == [1, 2, 4, 8, 16, 32, 64]


def test_every_bucket_at_its_width(monkeypatch):
    from sglang_ddtree.worker import kv_commit, tree_api

    seen = []
    real_topology, real_commit = tree_api.verify_topology, kv_commit.greedy_accept_commit

    def topology(tree, prefix, bound, bits_out=None):
        assert prefix.dtype == torch.int64 and tree.parents.dtype == torch.int64
        assert bits_out is not None and bits_out.dtype == torch.int32  # tree_bits: the topology writes them
        seen.append(("topology", tree.num_rows))
        return real_topology(tree, prefix, bound, bits_out=bits_out)

    def commit(tree, tokens, target, verify_loc, prefix, width):
        assert target.dtype == verify_loc.dtype == tokens.dtype == torch.int64 and width == 16
        seen.append(("commit", verify_loc.shape[1]))
        return real_commit(tree, tokens, target, verify_loc, prefix, width)

    monkeypatch.setattr(tree_api, "verify_topology", topology)
    monkeypatch.setattr(kv_commit, "greedy_accept_commit", commit)
    moves = []
    config = DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True)
    ran = warmup.warm_round_kernels(config, "cpu", tree_bits=True, vocab_size=32, max_batch_size=48,
                                    move_kv=lambda c, w: moves.append((c.accept_lens.tolist(), w)))
    widths = [b + 1 for b in config.buckets]
    # width 0 is chain-shaped (worker.chain_inputs): no build, no topology, but the commit and (not causal here) bits
    assert seen == [("commit", 1)] + [x for n in widths[1:] for x in (("topology", n), ("commit", n))]
    # the round's builds (roots written) per tree budget, and the forecast's largest build (no roots)
    assert [r for r in ran if r.startswith("build_tree")] == [f"build_tree:{b}" for b in config.buckets if b] + \
        ["build_tree:63:forecast"]
    # the trees' bits in their topology's launch; width 0 (chain-shaped, not causal here) by their own
    assert [r for r in ran if r.startswith("verify_topology")] == [f"verify_topology:{n}:bits" for n in widths[1:]]
    assert [r for r in ran if r.startswith("ancestor_bits")] == ["ancestor_bits:1"]
    assert moves == [([1], 16)] and "draw_rows" in ran  # the mover once: a dummy root accepts nothing
    assert not any(r.startswith("assign_extend") for r in ran)  # no req_to_token: not warmed (and not on CPU)


def test_a_fixed_budget_warms_its_one_width():
    config = DDTreeConfig(budget=15, topk=4, block_size=8)
    ran = warmup.warm_round_kernels(config, "cpu")
    assert ran == ["build_tree:15", "verify_topology:16", "accept_commit:16"]


def test_the_slot_kernel_needs_cuda():
    config = DDTreeConfig(budget=3, topk=2, block_size=4)
    ran = warmup.warm_round_kernels(config, "cpu", req_to_token=torch.zeros(4, 8, dtype=torch.int32),
                                    max_batch_size=8)
    assert not any(r.startswith("assign_extend") for r in ran)


@pytest.mark.parametrize("budget", [1, 2])
def test_small_budgets(budget):
    config = DDTreeConfig(budget=budget, topk=1, block_size=4)
    assert warmup.warm_round_kernels(config, "cpu")[0] == f"build_tree:{budget}"


def _bare_worker(monkeypatch, config):
    from types import SimpleNamespace

    from sglang_ddtree.worker import worker as worker_mod

    monkeypatch.setattr(worker_mod, "get_tp_group", lambda: SimpleNamespace(rank_in_group=0, world_size=1))
    w = worker_mod.DDTreeWorker.__new__(worker_mod.DDTreeWorker)
    w.config, w.device, w._move_kv, w._fa3_tree_bits = config, "cpu", None, None
    moved = []
    pool = SimpleNamespace(device="cpu", move_kv_cache=lambda tgt, src: moved.append((tgt.tolist(), src.tolist())))
    mr = SimpleNamespace(model_config=SimpleNamespace(vocab_size=64), max_running_requests=8,
                         req_to_token_pool=SimpleNamespace(req_to_token=torch.zeros(8, 32, dtype=torch.int32)),
                         token_to_kv_pool=pool)
    w._target_worker, w.model_runner = SimpleNamespace(model_runner=mr), mr
    monkeypatch.setattr(worker_mod.DDTreeWorker, "_decide_fa3_tree_bits", lambda self: False)
    return w, moved


def test_the_worker_warms_up_at_start(monkeypatch, caplog):
    """``DDTreeWorker._warm_round_kernels`` (end of ``init_cuda_graphs``): the mover and the fa3 decision are made
    there (the round keeps its guards), every bucket runs, the start-up log says how many calls in how long."""
    import logging

    w, moved = _bare_worker(monkeypatch, DDTreeConfig(budget=7, topk=2, block_size=4, adaptive=True))
    with caplog.at_level(logging.INFO, logger="sglang_ddtree.worker.worker"):
        w._warm_round_kernels()
    assert w._move_kv is not None and w._fa3_tree_bits is False
    assert moved == [([0, 0, 0, 0], [0, 0, 0, 0])]  # upstream's move with the dummy commit: slot 0 onto itself
    assert "round kernels warmed at start-up for budgets [0, 1, 3, 7]" in caplog.text


def test_a_failed_warm_up_is_said_and_not_fatal(monkeypatch, caplog):
    import logging

    w, _ = _bare_worker(monkeypatch, DDTreeConfig(budget=7, topk=2, block_size=4))
    from types import SimpleNamespace

    w.model_runner = SimpleNamespace()  # a model runner with nothing the warm-up reads
    with caplog.at_level(logging.WARNING, logger="sglang_ddtree.worker.worker"):
        w._warm_round_kernels()
    assert "were not compiled at start-up (AttributeError" in caplog.text and "compiles at its first round" in caplog.text


def test_the_warm_up_leaves_the_generator_alone():
    config = DDTreeConfig(budget=3, topk=2, block_size=4)
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    assert "draw_rows" in warmup.warm_round_kernels(config, "cpu", vocab_size=16)
    assert torch.equal(torch.rand(3), expected)


def test_the_switch(monkeypatch):
    monkeypatch.delenv(warmup.ENV, raising=False)
    assert warmup.enabled()  # on by default since it ran on the H200 (session 29)
    monkeypatch.setenv(warmup.ENV, "0")
    assert not warmup.enabled()
    monkeypatch.setenv(warmup.ENV, "1")
    assert warmup.enabled()
    monkeypatch.setenv(warmup.ENV, "yes")
    with pytest.raises(ValueError, match="SGLANG_DDTREE_WARMUP='yes': use 1"):
        warmup.enabled()
