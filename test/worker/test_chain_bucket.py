"""Budget auto's chain bucket (``config.ChainBucket``): the top-1 chain of ``max_depth`` drafts beside the tree
buckets, on fa3 verified causally as DFLASH verifies (``worker.widths.with_chain``). CPU checks of everything but
the verify: its identity as a key, the bucket set, the chain itself, its expected drafts, the policy and the
tables that price it, its verify resources at top-K 1, the warm-up, the benchmark's projection and log reader.
The GPU checks (sharp greedy parity pinned to it and in auto's bucket cycle on fa3, the 8B shape) are
``bash scripts/device/issue13.sh chain``."""

import json
import types

import pytest
import torch

from sglang_ddtree.config import ChainBucket, DDTreeConfig, bucket_budgets, is_chain, parse_bucket
from sglang_ddtree.width_policy import (CostModel, DraftForecast, ScoreAcceptModel, TableAcceptModel, WidthPolicy,
                                        chain_expected_drafts, expected_drafts_at)
from sglang_ddtree.worker import widths
from sglang_ddtree.worker.tree_api import build_tree

C15 = ChainBucket(15)


def test_a_chain_is_its_own_key_and_counts_as_its_drafts():
    assert C15 != 15 and 15 != C15 and C15 == ChainBucket(15) and C15 != ChainBucket(7)
    assert len({C15, 15}) == 2 and {C15: "chain", 15: "tree"}[C15] == "chain"
    assert C15 + 1 == 16 and C15 > 0 and int(C15) == 15 and C15 * 2 == 30  # verify rows, drafting, drafts x rows
    assert str(C15) == repr(C15) == f"{C15}" == "chain15" and is_chain(C15) and not is_chain(15)
    assert parse_bucket("chain15") == C15 and parse_bucket("15") == 15 and not is_chain(parse_bucket("15"))
    for bad in ("chain", "chainx", "x15"):
        with pytest.raises(ValueError):
            parse_bucket(bad)
    with pytest.raises(ValueError):
        ChainBucket(0)


@pytest.mark.parametrize("budget,block,want", [
    (63, 16, (0, 1, 3, 7, C15, 15, 31, 63)),
    (15, 16, (0, 1, 3, 7, C15, 15)),
    (20, 16, (0, 1, 3, 7, C15, 15, 20)),
    (7, 16, (0, 1, 3, ChainBucket(7), 7)),  # max depth 7: the chain of 7
    (63, 8, (0, 1, 3, ChainBucket(7), 7, 15, 31, 63)),
    (1, 16, (0, 1)),  # a chain of one draft is the tree of budget 1
])
def test_the_bucket_set_holds_the_chain_before_the_tree_of_its_width(budget, block, want):
    config = DDTreeConfig(budget=budget, topk=1, block_size=block, adaptive=True, chain=True)
    assert config.buckets == want and [type(b) for b in config.buckets] == [type(b) for b in want]
    assert DDTreeConfig(budget=budget, topk=1, block_size=block, adaptive=True).buckets == bucket_budgets(budget)
    assert sorted(config.buckets) == list(config.buckets)  # WidthPolicy's ascending check holds


def test_a_chain_needs_budget_auto():
    with pytest.raises(ValueError, match="chain bucket needs budget auto"):
        DDTreeConfig(budget=15, topk=4, block_size=16, chain=True)


def _top1_tree(lp, ids, drafts):
    """What the builder makes of each position's best token alone: the chain of ``drafts`` top-1 drafts."""
    return build_tree(lp[:, :, :1].contiguous(), ids[:, :, :1].contiguous(), drafts, backend="torch")


def test_the_chain_rounds_constant_structure_is_the_top1_tree():
    """A chain-shaped round takes its structure from ``ChainInputs`` instead of the builder: the same rows."""
    from sglang_ddtree.worker.chain_inputs import ChainInputs

    torch.manual_seed(0)
    lp = torch.randn(3, 15, 8).log_softmax(-1).sort(-1, descending=True).values
    ids = torch.randint(0, 1000, (3, 15, 8))
    chains = ChainInputs([16, 8, 3], max_depth=15, device="cpu")
    root = torch.tensor([5, 6, 7])
    for drafts in (15, 7, 2):
        top1 = _top1_tree(lp, ids, drafts)
        chain = chains.tree(chains.tokens(root, ids[:, :drafts, 0]))
        assert chain.num_rows == drafts + 1 and chain.scores is None
        assert torch.equal(chain.parents, torch.arange(-1, drafts).expand(3, -1))
        assert torch.equal(chain.token_ids[:, 1:], ids[:, :drafts, 0]) and torch.equal(chain.token_ids[:, 0], root)
        assert torch.allclose(top1.scores[:, 1:], lp[:, :drafts, 0].cumsum(1))
        for name in ("parents", "depths", "valid", "num_nodes"):
            assert torch.equal(getattr(chain, name), getattr(top1, name)), name
        assert torch.equal(chain.token_ids[:, 1:], top1.token_ids[:, 1:])


def test_chain_expected_drafts_is_the_sum_of_its_path_probabilities():
    torch.manual_seed(1)
    lp = torch.randn(4, 15, 8).log_softmax(-1).sort(-1, descending=True).values
    chain = _top1_tree(lp, torch.randint(0, 9, (4, 15, 8)), 15)
    got = chain_expected_drafts(lp[:, :, 0])
    assert torch.allclose(got, chain.scores[:, 1:].exp().sum(1))
    # a tree of the same width holds the best 15 prefixes: never fewer expected drafts than the chain
    tree = build_tree(lp, torch.randint(0, 9, (4, 15, 8)), 63)
    assert torch.all(expected_drafts_at(tree.scores, [15])[:, 0] >= got - 1e-5)
    # a certain chain accepts every draft
    assert chain_expected_drafts(torch.zeros(2, 15)).tolist() == [15.0, 15.0]


def test_a_stated_table_prices_the_chain_by_its_own_entry():
    model = TableAcceptModel({16: 8.61, 64: 9.75, C15: 7.79})
    assert model.tokens_per_request(C15) == 7.79 and model.tokens_per_request(15) == 8.61  # 15: clamped tree
    assert TableAcceptModel({16: 8.61}).tokens_per_request(16) == 8.61
    with pytest.raises(ValueError, match="no entry for the chain bucket chain15"):
        TableAcceptModel({16: 8.61}).tokens_per_request(C15)
    with pytest.raises(ValueError, match="at least one tree budget"):
        TableAcceptModel({C15: 7.79})


def test_the_engine_table_must_cover_the_chain(monkeypatch):
    budgets = (0, 1, 3, 7, C15, 15, 31, 63)
    monkeypatch.setenv(widths.ACCEPT_TABLE_ENV, json.dumps({"16": 8.61, "64": 9.75, "chain15": 7.79}))
    assert widths.accept_model(budgets).tokens_per_request(C15) == 7.79
    monkeypatch.setenv(widths.ACCEPT_TABLE_ENV, json.dumps({"16": 8.61, "64": 9.75}))
    with pytest.raises(ValueError, match="covering the buckets .*chain15"):
        widths.accept_model(budgets)
    assert isinstance(widths.accept_model((0, 1, 3)), TableAcceptModel)  # no chain: as before


def test_the_policy_takes_the_chain_where_it_is_cheaper_for_the_same_tokens():
    budgets = (0, 1, 3, 7, C15, 15, 31, 63)
    costs = CostModel([8], budgets)
    for b, ms in zip(budgets, (5.0, 6.0, 6.2, 6.6, 7.4, 7.7, 10.0, 11.0)):
        costs.seed(8, b, ms)
    # the table's lower bound for a tree below 16 nodes is DFLASH's chain: the two tie on tokens, the chain is cheaper
    table = TableAcceptModel({C15: 7.79, 15: 7.79, 16: 8.61, 32: 9.27, 64: 9.75, 1: 1.85, 3: 3.2, 7: 5.1})
    policy = WidthPolicy(budgets, costs, table, explore_every=0, tie_every=0)
    assert policy.choose(8) == C15
    rates = policy.rates(8)
    assert rates[C15] == pytest.approx(1000 * 8 * 7.79 / 7.4) and rates[15] == pytest.approx(1000 * 8 * 7.79 / 7.7)
    # the cost model keeps the chain's rounds apart from the tree's (which only borrows the drafting offset)
    for _ in range(4):
        costs.observe(8, C15, 9.0)
        costs.observe(8, 15, 8.0)
    assert costs.cost(8, C15) == 9.0 and costs.cost(8, 15) == 8.0
    assert policy.choose(8) == 15
    # from the drafter's scores: the chain's column of the forecast is its own
    score = ScoreAcceptModel(budgets)
    sums = [0.0, 0.9, 2.0, 3.5, 4.0, 6.0, 7.0, 7.5]
    got = score.expected_tokens(8, budgets, DraftForecast(8, sums))
    assert got[budgets.index(C15)] == pytest.approx(8 + 4.0) and got[budgets.index(15)] == pytest.approx(8 + 6.0)


def test_a_round_of_two_requests_does_not_set_the_chains_ratio():
    """Session 36's tiny-pair run at bs 16 (``results/session36/phase_split_bs16_e2e.log.gz``): the chain's first
    forecast round had two requests, 1.06 accepted drafts predicted and 2 observed. When each round's own ratio
    entered a running average and a bucket's first round set it, the chain's ratio became 1.89, and with the
    batch's forecast (per request: 1.0 chain drafts, 1.6 at 15, 2.07 at 63) and that run's costs the chain won
    the round where budget 63 paid. A round weighs what it predicted: the same rounds leave the choice at 63."""
    budgets = (0, C15, 15, 63)
    costs = CostModel([16], budgets)
    for b, ms in ((0, 2.14), (C15, 2.92), (15, 3.13), (63, 3.18)):
        costs.seed(16, b, ms)
    acc = ScoreAcceptModel(budgets)
    policy = WidthPolicy(budgets, costs, acc)
    full_batch = {63: (16 * 2.07, 16 * 2.03), 15: (16 * 1.86, 16 * 1.77)}  # forecast rounds of 16 requests
    for b, (p, o) in full_batch.items():
        acc.observe(b, predicted=p, observed=o)
    acc.observe(C15, predicted=1.06, observed=2.0)  # the chain's first: two requests
    assert acc.ratio_for(C15) < 1.15  # the old rule: 2.0 / 1.06 = 1.89
    drafts = DraftForecast(16, [0.0, 16 * 1.0, 16 * 1.6, 16 * 2.07])
    assert policy.choose(16, drafts) == 63
    # the chain at that round's own ratio (no prior, no memory: 1.89) takes the round from 63
    raw = ScoreAcceptModel(budgets, smoothing=1.0, prior_drafts=0.0)
    for b, (p, o) in full_batch.items():
        raw.observe(b, predicted=p, observed=o)
    raw.observe(C15, predicted=1.06, observed=2.0)
    assert raw.ratio_for(C15) == pytest.approx(2.0 / 1.06)
    assert WidthPolicy(budgets, costs, raw).choose(16, drafts) == C15
    # the chain's full-batch forecast rounds of that run (per request, 16 requests) bring it to what they read
    rounds = ((1.42, 1.75), (0.92, 0.56), (0.62, 0.50))
    for p, o in rounds:
        acc.observe(C15, predicted=16 * p, observed=16 * o)
    assert acc.ratio_for(C15) == pytest.approx(sum(o for _, o in rounds) / sum(p for p, _ in rounds), abs=0.05)


def test_score_model_arguments():
    for kwargs in (dict(smoothing=0.0), dict(smoothing=1.5), dict(prior_ratio=0.0), dict(prior_drafts=-1.0)):
        with pytest.raises(ValueError, match="smoothing must be in"):
            ScoreAcceptModel((0, 15), **kwargs)
    pure = ScoreAcceptModel((0, 15), prior_drafts=0.0)  # no prior: the first round's own ratio
    pure.observe(15, predicted=4.0, observed=1.0)
    assert pure.ratio_for(15) == 0.25 and pure.ratio_for(7) == 0.25  # unobserved: the mean of the observed


def test_forecast_rounds_stage_the_chains_own_expected_drafts(monkeypatch):
    import test_auto_width as taw

    monkeypatch.setattr(widths.torch.cuda, "Event", taw._FakeEvent)
    monkeypatch.setattr(widths, "_pinned", lambda n: torch.zeros(n, dtype=torch.float32))
    monkeypatch.delenv(widths.ACCEPT_TABLE_ENV, raising=False)
    taw._Clock.now, taw._Clock.done_until = 0.0, -1.0
    config = DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True, chain=True)
    auto = widths.AutoWidth(config, [1, 8], max_batch_size=8, device="cpu")
    scores = torch.full((8, 64), float("-inf"))
    scores[:, 0] = 0.0
    scores[:, 1:4] = torch.log(torch.tensor([0.9, 0.5, 0.25]))
    top1 = torch.log(torch.full((8, 15), 0.5))  # the chain: 0.5 + 0.25 + ... = 1 - 2^-15
    for with_chain in (True, False):
        slot = auto.begin(8, C15)
        taw._Clock.now += 1.0
        if with_chain:
            auto.finish(slot, scores, torch.full((8,), 2, dtype=torch.int32), top1)
        else:
            with pytest.raises(AssertionError, match="chain's log-probs"):
                auto.finish(slot, scores, torch.full((8,), 2, dtype=torch.int32))
        taw._Clock.now += 1.0
    taw._Clock.done_until = taw._Clock.now
    auto.choose(8)
    sums = dict(zip(auto.budgets, auto.forecast.sums))
    assert sums[C15] == pytest.approx(8 * (1 - 2 ** -15)) and sums[15] == pytest.approx(8 * 1.65)
    acc = auto.accept  # observed 1 draft a request, on top of the decayed prior
    keep, prior, predicted = 1.0 - acc.smoothing, acc.prior_drafts, 8 * (1 - 2 ** -15)
    assert acc.ratio_for(C15) == pytest.approx((keep * prior * acc.prior_ratio + 8.0) / (keep * prior + predicted))


def _runner(monkeypatch, fa3: bool):
    from sglang_ddtree.worker import fa3_tree

    monkeypatch.setattr(fa3_tree, "target_uses_fa3", lambda mr: fa3)
    return types.SimpleNamespace()


def test_with_chain_only_for_auto_on_fa3_dense_targets(monkeypatch):
    auto = DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True)
    fixed = DDTreeConfig(budget=15, topk=8, block_size=16)
    monkeypatch.delenv(widths.CHAIN_ENV, raising=False)
    assert widths.with_chain(auto, _runner(monkeypatch, True), hybrid=False).chain
    assert not widths.with_chain(auto, _runner(monkeypatch, False), hybrid=False).chain  # triton / flashinfer
    assert not widths.with_chain(auto, _runner(monkeypatch, True), hybrid=True).chain
    assert widths.with_chain(fixed, _runner(monkeypatch, True), hybrid=False) is fixed
    monkeypatch.setenv(widths.CHAIN_ENV, "0")
    assert not widths.with_chain(auto, _runner(monkeypatch, True), hybrid=False).chain
    monkeypatch.setenv(widths.CHAIN_ENV, "yes")
    with pytest.raises(ValueError, match="SGLANG_DDTREE_AUTO_CHAIN='yes': use 1"):
        widths.with_chain(auto, _runner(monkeypatch, True), hybrid=False)


def test_the_causal_buckets_verify_resources_are_built_at_topk_1(monkeypatch):
    """VerifyWidths builds each bucket's attention backend under server args that say its width; the chain's and,
    beside it, width 0's also say top-K 1, so fa3's backend verifies them causally (upstream's ``topk <= 1`` path);
    the args are restored. Without the chain, width 0 keeps the server's top-K."""
    import sglang.srt.utils as sg_utils

    monkeypatch.setattr(sg_utils, "get_available_gpu_memory", lambda *a, **k: 10.0)
    monkeypatch.setattr(widths, "_set_fields", lambda sa, **f: [setattr(sa, k, v) for k, v in f.items()])
    args = types.SimpleNamespace(speculative_num_draft_tokens=64, speculative_eagle_topk=8)
    seen = []

    def backend(init_new_workspace=False):
        seen.append((args.speculative_num_draft_tokens, args.speculative_eagle_topk))
        return object()

    mr = types.SimpleNamespace(attn_backend="own", decode_cuda_graph_runner=None, _get_attention_backend=backend,
                               device="cpu", gpu_id=0)
    config = DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True, chain=True)
    vw = widths.VerifyWidths(mr, args, config, capture_graphs=False)
    assert seen == [(1, 1), (2, 8), (4, 8), (8, 8), (16, 1), (16, 8), (32, 8)]
    assert set(vw.sets) == set(config.buckets) and vw.sets[63] == ("own", None)
    assert (args.speculative_num_draft_tokens, args.speculative_eagle_topk) == (64, 8)
    with vw.active(C15) as b:
        assert mr.attn_backend is b is vw.sets[C15][0] and b is not vw.sets[15][0]
    assert mr.attn_backend == "own"
    assert [b for b in config.buckets if config.verifies_causally(b)] == [0, C15]
    seen.clear()
    trees_only = DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True)
    widths.VerifyWidths(mr, args, trees_only, capture_graphs=False)
    assert seen == [(1, 8), (2, 8), (4, 8), (8, 8), (16, 8), (32, 8)]
    assert not any(trees_only.verifies_causally(b) for b in trees_only.buckets)


def test_the_warm_up_runs_chain_shaped_buckets_without_build_topology_or_bits():
    from sglang_ddtree.worker import warmup

    config = DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True, chain=True)
    ran = warmup.warm_round_kernels(config, "cpu", tree_bits=True)
    assert "build_tree:15" in ran and not any(r.startswith("build_tree:chain") for r in ran)
    # the trees' bits come with their topology (one launch); the causal chain-shaped buckets have neither
    assert not any(r.startswith("ancestor_bits") for r in ran)
    assert [r for r in ran if r.startswith("verify_topology")] == [f"verify_topology:{b + 1}:bits"
                                                                   for b in config.buckets if b != 0 and not is_chain(b)]
    assert ran.count("accept_commit:16") == 2 and ran.count("accept_commit:1") == 1  # the chain and tree 15; width 0
    # trees only: width 0 is still chain-shaped (no build, no topology) but verifies with bits on fa3
    ran = warmup.warm_round_kernels(DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True), "cpu",
                                    tree_bits=True)
    assert "ancestor_bits:1" in ran and "verify_topology:1" not in ran


def test_the_benchmark_projects_the_chain_at_dflash_tau():
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmark"))
    import shape_projection as sp

    table = sp.with_chain_bucket(sp.with_small_budgets(sp.PAPER_ACCEPT, bucket_budgets(63)))
    assert table["ddtree"]["chain15"] == pytest.approx(7.79, abs=1e-3)
    # the tree of 15 drafts: the larger of its chain's bound (7.79) and 15 / 16 of the 16-node tree's drafts (8.13)
    assert table["ddtree"]["15"] == pytest.approx(1 + 15 / 16 * (8.61 - 1), abs=1e-3)
    assert sp.tau_for_budget(table["ddtree"], C15)[0] == pytest.approx(7.79, abs=1e-3)
    assert sp.tau_for_budget(table["ddtree"], 16) == (8.61, "table")  # the chain's entry leaves the trees alone
    tau, how = sp.auto_tau(table["ddtree"], {"chain15": 3, "31": 1, "0": 1})
    assert tau == pytest.approx((3 * 7.79 + sp.tau_for_budget(table["ddtree"], 31)[0] + 1.0) / 5, abs=1e-3)
    stated = dict(sp.PAPER_ACCEPT, ddtree={**sp.PAPER_ACCEPT["ddtree"], "chain15": 7.0})
    assert sp.with_chain_bucket(stated)["ddtree"]["chain15"] == 7.0  # a stated entry is kept


def test_the_round_log_reader_reads_the_chain():
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmark"))
    import auto_log_rounds

    line = ("Decode batch, #running-req: 8, #token: 900, accept len: 7.50, auto budget: mean 15.0, rounds by budget "
            "chain15:1, accepted drafts predicted 6.00 observed 6.50, ms/round at bs 8 {0: 5.00, chain15: 7.40, "
            "15: 7.70, 31: -}, gen throughput (token/s): 8000.00")
    rows = auto_log_rounds.rounds([line])
    assert rows == [(8, C15, pytest.approx(1000 * 8 * 7.5 / 8000), {0: 5.0, C15: 7.4, 15: 7.7})]
    assert is_chain(rows[0][1]) and not any(is_chain(b) for b in rows[0][3] if b == 15)
    summary = auto_log_rounds._jsonable(auto_log_rounds.summarise(rows))
    assert json.loads(json.dumps(summary))["8"]["sequence"] == ["chain15"]
    assert "chain15" in json.loads(json.dumps(summary))["8"]["buckets"]


def test_the_test_plugin_pins_the_chain():
    import _test_plugin_env  # noqa: F401  (puts the test plugin on the path)
    from ddtree_test_hooks import env as hook_env

    got = hook_env.HookEnv.from_env({hook_env.PIN_BUDGET: "chain15"})
    assert got.pin_budget == C15 and is_chain(got.pin_budget)
    assert hook_env.HookEnv.from_env({hook_env.PIN_BUDGET: "0"}).pin_budget == 0
    with pytest.raises(ValueError, match="need a bucket"):
        hook_env.HookEnv.from_env({hook_env.PIN_BUDGET: "chainx"})


def test_the_worker_decides_the_chain_before_auto_and_the_warm_up_read_the_buckets(monkeypatch):
    """The target's attention backend exists only from the draft worker's ``init_cuda_graphs`` on (at ``__init__``
    it did not: the first H200 run of the chain failed there), so the chain is decided there, before the verify
    widths, the calibration and the warm-up read ``config.buckets``."""
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    from sglang_ddtree.worker import fa3_tree
    from sglang_ddtree.worker import worker as worker_mod

    import contextlib

    import sglang_ddtree.compat as compat

    seen = []
    # from 0.5.17 the drafter's widths scope a process-wide namespace no engine published here
    monkeypatch.setattr(type(compat.adapter()), "drafter_widths", lambda self, config: contextlib.nullcontext())
    monkeypatch.setattr(DFlashWorkerV2, "init_cuda_graphs", lambda self: None)
    monkeypatch.setattr(worker_mod.DDTreeWorker, "_init_draft_kv_graphs", lambda self: None)
    monkeypatch.setattr(worker_mod.DDTreeWorker, "_init_auto", lambda self: seen.append(("auto", self.config.buckets)))
    monkeypatch.setattr(worker_mod.DDTreeWorker, "_warm_round_kernels",
                        lambda self: seen.append(("warm-up", self.config.buckets)))
    monkeypatch.setattr(worker_mod.DDTreeWorker, "target_worker", types.SimpleNamespace(model_runner="mr"))
    monkeypatch.setattr(fa3_tree, "target_uses_fa3", lambda mr: mr == "mr")
    monkeypatch.delenv(widths.CHAIN_ENV, raising=False)
    monkeypatch.setenv("SGLANG_DDTREE_WARMUP", "1")
    monkeypatch.setenv("SGLANG_DDTREE_HEAD_GRAPH", "0")  # the heads come after both (test_head_graph.py)
    w = worker_mod.DDTreeWorker.__new__(worker_mod.DDTreeWorker)
    w.config, w._hybrid = DDTreeConfig(budget=63, topk=8, block_size=16, adaptive=True), False
    w.init_cuda_graphs()
    want = (0, 1, 3, 7, C15, 15, 31, 63)
    assert w.config.chain and seen == [("auto", want), ("warm-up", want)]
