"""CPU: the TEST-ONLY draft oracle (``sglang_ddtree.worker.draft_oracle``) builds what it promises.

Per position: log-probs sorted descending and <= 0, ids distinct and in the vocabulary; the true
continuation at the planned rank up to the cut and absent at the cut depth. Through the worker's tree
builder (``tree_api.build_tree``) and a greedy acceptance walk against the successor map, every round
accepts exactly its planned number of drafts, through its planned sibling; across many (root, position)
pairs the plans cover every accept length 0..D and every branch depth and rank. The knob parsing (the
removed SGLANG_DDTREE_TREE_IMPL included), the JSON loader, and the GPU test's exact scenario
(``test_accept_coverage_gpu.py``) replayed on CPU with the generated "succ" models: the model is
context-free and the replay covers every accept length and branch depth.
"""

import collections
import json
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _worker_oracles import accept_walk  # noqa: E402

from sglang_ddtree.worker.debug import WorkerKnobs  # noqa: E402
from sglang_ddtree.worker.draft_oracle import (DraftOracle, load_draft_oracle, max_branch_rank,  # noqa: E402
                                               oracle_plan, oracle_topk, replay_rounds, true_continuation)
from sglang_ddtree.worker.geometry import RoundGeometry  # noqa: E402
from sglang_ddtree.worker.tree_api import build_tree, fill_root  # noqa: E402

V = 97


def _succ(vocab=V, seed=0):
    return torch.randint(vocab, (vocab,), generator=torch.Generator().manual_seed(seed))


def _inputs(n=512, vocab=V, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(vocab, (n,), generator=g), torch.randint(1, 4000, (n,), generator=g)


@pytest.mark.parametrize("depth,topk,budget", [(7, 4, 64), (7, 8, 64), (15, 4, 64), (3, 2, 3), (7, 1, 64), (7, 4, 10)])
def test_topk_shape_order_distinct_and_plan(depth, topk, budget):
    succ = _succ()
    roots, pos = _inputs()
    max_accept = min(budget, depth)
    max_rank = max_branch_rank(topk, budget, max_accept)
    lp, ids, plan = oracle_topk(roots, pos, succ, depth=depth, topk=topk, seed=5, max_accept=max_accept,
                                max_rank=max_rank)
    bs = roots.shape[0]
    assert lp.shape == ids.shape == (bs, depth, topk) and lp.dtype == torch.float32 and ids.dtype == torch.int64
    assert lp.is_contiguous() and ids.is_contiguous()
    assert torch.isfinite(lp).all() and (lp <= 0).all()
    assert (lp[..., 1:] < lp[..., :-1]).all(), "log-probs must be strictly descending per position"
    assert ((ids >= 0) & (ids < V)).all()
    assert (ids.sort(-1).values.diff(dim=-1) != 0).all(), "ids must be distinct per position"
    assert ((plan.cut >= 0) & (plan.cut <= max_accept)).all()
    cont = true_continuation(roots, succ, depth)
    for i in range(bs):
        a, b, r = int(plan.cut[i]), int(plan.branch_depth[i]), int(plan.branch_rank[i])
        assert (b == 0) == (r == 0) and (b == 0 or 1 <= b <= a) and r <= max_rank
        if max_rank and a >= 1:
            assert b >= 1
        for d in range(1, depth + 1):
            hit = (ids[i, d - 1] == cont[i, d - 1]).nonzero().flatten().tolist()
            if d <= a:
                assert hit == [r if d == b else 0], (i, d, a, b, r, hit)
            elif d == a + 1:
                assert hit == [], (i, d, a, hit)


@pytest.mark.parametrize("depth,topk,budget", [(7, 4, 64), (7, 8, 64), (15, 8, 512), (7, 4, 20)])
def test_cheap_prefixes_fit_the_budget(depth, topk, budget):
    """The bound behind "the tree always holds the planned path": every prefix made of cheap ranks
    (rank 0, or ranks 0..r at the branch depth) outscores every prefix with another rank, and there are
    at most ``budget`` cheap prefixes."""
    max_rank = max_branch_rank(topk, budget, depth)
    lp, _, plan = oracle_topk(*_inputs(256), _succ(), depth=depth, topk=topk, seed=0, max_accept=depth,
                              max_rank=max_rank)
    n_cheap = 1 + torch.where(torch.arange(1, depth + 1) == plan.branch_depth.unsqueeze(1),
                              plan.branch_rank.unsqueeze(1), 0)  # [bs, D]
    cheap = torch.arange(topk) < n_cheap.unsqueeze(2)
    worst_cheap = torch.where(cheap, lp, 0.0).min(-1).values.sum(-1)  # deepest, lowest cheap path
    best = lp[..., 0]  # [bs, D]
    best_other = torch.where(cheap, float("-inf"), lp).max(-1).values  # best non-cheap rank per depth
    best_expensive = (best.sum(-1, keepdim=True) - best + best_other).max(-1).values
    assert (worst_cheap > best_expensive).all()
    prefixes = n_cheap.cumprod(dim=1).sum(dim=1)  # cheap prefixes at depths 1..D
    assert (prefixes <= budget).all(), int(prefixes.max())
    assert max_branch_rank(4, 64, 7) == 3 and max_branch_rank(8, 64, 7) == 7 and max_branch_rank(8, 20, 7) == 1
    assert max_branch_rank(4, 10, 7) == 0 and max_branch_rank(1, 64, 7) == 0 and max_branch_rank(4, 3, 3) == 0


@pytest.mark.parametrize("depth,topk,budget", [(7, 4, 64), (7, 8, 64), (7, 4, 28), (15, 4, 64), (7, 2, 7)])
def test_trees_accept_exactly_the_plan(depth, topk, budget):
    """Build the worker's tree from the oracle's top-K, walk it greedily against succ: accepted drafts
    == plan.cut, and the accepted node at the branch depth is that depth's rank-r candidate."""
    succ = _succ()
    roots, pos = _inputs(256)
    g = RoundGeometry(budget=budget, topk=topk, block_size=depth + 1)
    oracle = DraftOracle(succ.tolist(), seed=3, block_size=g.block_size, topk=topk, budget=budget,
                         max_accept=g.max_depth, device="cpu")
    lp, ids = oracle(roots, pos)
    plan = oracle_plan(roots, pos, seed=3, max_accept=g.max_depth, max_rank=oracle.max_rank)
    tree = build_tree(lp, ids, budget)
    tokens = fill_root(tree, roots)
    branched = collections.Counter()
    for i in range(roots.shape[0]):
        target_next = succ[tokens[i]]
        rows, _ = accept_walk(tokens[i], tree.parents[i], tree.valid[i], target_next)
        a, b, r = int(plan.cut[i]), int(plan.branch_depth[i]), int(plan.branch_rank[i])
        assert len(rows) - 1 == a, (i, len(rows) - 1, a)
        if b:
            assert int(tokens[i, rows[b]]) == int(ids[i, b - 1, r]) and r > 0
            branched[b] += 1
    if oracle.max_rank and g.max_depth <= 7:  # 256 plans cover 7 depths surely, 15 not
        assert set(branched) == set(range(1, g.max_depth + 1)), branched


def test_plans_cover_every_accept_length_depth_and_rank():
    roots, pos = _inputs(4000)
    plan = oracle_plan(roots, pos, seed=0, max_accept=7, max_rank=3)
    assert set(plan.cut.tolist()) == set(range(8))
    assert set(plan.branch_depth[plan.cut >= 1].tolist()) == set(range(1, 8))
    assert set(plan.branch_rank[plan.cut >= 1].tolist()) == {1, 2, 3}
    deep = plan.cut == 7
    assert set(plan.branch_depth[deep].tolist()) == set(range(1, 8))
    # deterministic, and the position matters (a cycle of roots still varies its plans)
    again = oracle_plan(roots, pos, seed=0, max_accept=7, max_rank=3)
    assert all(torch.equal(x, y) for x, y in zip(plan, again))
    moved = oracle_plan(roots, pos + 1, seed=0, max_accept=7, max_rank=3)
    assert not torch.equal(plan.cut, moved.cut)
    other_seed = oracle_plan(roots, pos, seed=1, max_accept=7, max_rank=3)
    assert not torch.equal(plan.cut, other_seed.cut)


def test_replay_rounds_walks_the_output():
    succ = _succ().tolist()
    out = [succ[5]]
    while len(out) < 40:
        out.append(succ[out[-1]])
    rounds = replay_rounds(out, prompt_len=9, max_new_tokens=40, seed=2, max_accept=7, max_rank=3)
    i = 0
    for cut, _, _ in rounds:
        plan = oracle_plan(torch.tensor([out[i]]), torch.tensor([9 + i]), seed=2, max_accept=7, max_rank=3)
        assert int(plan.cut[0]) == cut
        i += cut + 1
    assert i + 1 >= 40 and sum(c + 1 for c, _, _ in rounds[:-1]) + 1 < 40


def test_knob_and_loader(tmp_path, monkeypatch):
    for var in ("SGLANG_DDTREE_TEST_DRAFT_ORACLE", "SGLANG_DDTREE_TEST_REVERSE_RANKS", "SGLANG_DDTREE_TREE_IMPL"):
        monkeypatch.delenv(var, raising=False)
    assert WorkerKnobs.from_env().draft_oracle_path == ""
    spec = tmp_path / "oracle.json"
    spec.write_text(json.dumps({"successor": _succ().tolist(), "seed": 4}))
    monkeypatch.setenv("SGLANG_DDTREE_TEST_DRAFT_ORACLE", str(spec))
    assert WorkerKnobs.from_env().draft_oracle_path == str(spec)
    monkeypatch.setenv("SGLANG_DDTREE_TEST_REVERSE_RANKS", "1")
    with pytest.raises(ValueError, match="exclude each other"):
        WorkerKnobs.from_env()
    monkeypatch.delenv("SGLANG_DDTREE_TEST_REVERSE_RANKS")
    monkeypatch.setenv("SGLANG_DDTREE_TEST_DRAFT_ORACLE", str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="not a file"):
        WorkerKnobs.from_env()
    monkeypatch.delenv("SGLANG_DDTREE_TEST_DRAFT_ORACLE")
    for stale in ("stopgap", "package"):  # the removed tree-builder knob stops the worker, never ignored
        monkeypatch.setenv("SGLANG_DDTREE_TREE_IMPL", stale)
        with pytest.raises(ValueError, match="SGLANG_DDTREE_TREE_IMPL.*removed"):
            WorkerKnobs.from_env()
    monkeypatch.delenv("SGLANG_DDTREE_TREE_IMPL")
    assert WorkerKnobs.from_env() == WorkerKnobs()

    g = RoundGeometry(budget=64, topk=4, block_size=8)
    oracle = load_draft_oracle(str(spec), g, vocab_size=V, device="cpu")
    assert (oracle.seed, oracle.depth, oracle.topk, oracle.max_accept, oracle.max_rank) == (4, 7, 4, 7, 3)
    assert "branch ranks 1..3" in oracle.describe()
    with pytest.raises(ValueError, match="vocabulary only"):
        load_draft_oracle(str(spec), g, vocab_size=V - 1, device="cpu")
    bad = tmp_path / "bad.json"
    for content in ({"successor": [0, 5]}, {"seed": 1}, {"successor": [0, "a"]}):
        bad.write_text(json.dumps(content))
        with pytest.raises(ValueError):
            load_draft_oracle(str(bad), g, vocab_size=V, device="cpu")


# ---- the GPU test's scenario, on CPU -------------------------------------------------------------
@pytest.fixture(scope="module")
def succ_models(tmp_path_factory):
    from _generated_models import successor_logits, write_succ_pair

    target, draft = write_succ_pair(str(tmp_path_factory.mktemp("succ_models")))
    return target, draft, successor_logits(target)


def test_succ_target_is_context_free_with_bf16_safe_margins(succ_models):
    """float32 reference forward of the saved bf16 target, with context: every greedy step is the
    table's successor of the current token, and the table's top-1 beats the top-2 by >= 1 everywhere."""
    from sglang_ddtree.reference.qwen3 import Qwen3ForCausalLM
    from test_accept_coverage_gpu import make_prompts

    target_dir, _, logits = succ_models
    top2 = logits.topk(2, dim=-1).values
    assert float((top2[:, 0] - top2[:, 1]).min()) >= 1.0
    succ = logits.argmax(-1)
    target = Qwen3ForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    with torch.no_grad():
        for prompt in make_prompts()[:4]:
            ids = list(prompt)
            for _ in range(12):
                step = target(torch.tensor([ids]), torch.arange(len(ids))[None]).logits[0, -1]
                assert int(step.argmax()) == int(succ[ids[-1]])
                ids.append(int(step.argmax()))


def test_gpu_scenario_covers_every_accept_length_and_branch_depth(succ_models):
    import test_accept_coverage_gpu as gpu

    succ = succ_models[2].argmax(-1).tolist()
    hist = [0] * (gpu.MAX_DEPTH + 1)
    branches = collections.Counter()
    for prompt in gpu.make_prompts():
        rounds = gpu.planned_rounds(prompt, gpu.successor_chain(prompt, succ))
        hist = [x + y for x, y in zip(hist, gpu.histogram(rounds))]
        branches.update(gpu.branch_counts(rounds))
    assert min(hist) >= 10, hist
    assert min(branches[d] for d in range(1, gpu.MAX_DEPTH + 1)) >= 2, branches
