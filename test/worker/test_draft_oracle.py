"""CPU: the TEST-ONLY draft oracle and the test plugin that carries it (``test/_test_plugin``).

The oracle (``ddtree_test_hooks.draft_oracle``) builds what it promises. Per position: log-probs sorted
descending and <= 0, ids distinct and in the vocabulary; the true continuation at the planned rank up to
the cut and absent at the cut depth. Through the worker's tree builder (``tree_api.build_tree``) and a
greedy acceptance walk against the successor map, every round accepts exactly its planned number of
drafts, through its planned sibling; across many (root, position) pairs the plans cover every accept
length 0..D and every branch depth and rank. The plugin: its environment parsing, that it registers
nothing without its variables, its DRAFT / VERIFY / BUILD hooks on stand-in worker objects (fakes: these
check the hooks' own logic, not SGLang), and once for real in a subprocess: SGLang's ``load_plugins()``
finds the entry point through ``_test_plugin_env`` and wraps ``DDTreeWorker._draft`` / ``_verify`` and the
worker's ``verify_topology``, whose corrupted CPU output is checked. Finally the GPU test's exact scenario
(``test_accept_coverage_gpu.py``) replayed on CPU with the generated "succ" models: the model is
context-free and the replay covers every accept length and branch depth.
"""

import collections
import json
import os
import subprocess
import sys
import types

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _test_plugin_env import (PLUGIN_DIR, TEST_VARS, plugin_env, process_env, registrations,  # noqa: E402
                              without_test_vars)
from _worker_oracles import accept_walk  # noqa: E402

from ddtree_test_hooks import hooks as test_hooks  # noqa: E402
from ddtree_test_hooks.draft_oracle import (DraftOracle, ReplayTable, load_draft_oracle,  # noqa: E402
                                            max_branch_rank, oracle_plan, oracle_topk, replay_rounds,
                                            true_continuation)
from ddtree_test_hooks.env import HookEnv  # noqa: E402
from sglang_ddtree.config import DDTreeConfig  # noqa: E402
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
    g = DDTreeConfig(budget=budget, topk=topk, block_size=depth + 1)
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


CV = 5003  # the context sequences' vocabulary: large enough that two sequences rarely share a (position, token)


def _context_sequences(n=24, length=60, vocab=CV, seed=7):
    """Sequences whose next token depends on the position too (no successor map explains them)."""
    g = torch.Generator().manual_seed(seed)
    seqs = []
    for _ in range(n):
        s = torch.randint(vocab, (5,), generator=g).tolist()
        while len(s) < length:
            s.append((s[-1] * 31 + len(s) * 17 + s[-3]) % vocab)
        seqs.append(s)
    return seqs


def test_replay_table_looks_up_positions_and_tokens():
    seqs = _context_sequences()
    table = ReplayTable(seqs, vocab=CV, depth=6, device="cpu")
    roots = torch.tensor([seqs[0][10], seqs[3][57], seqs[5][58], seqs[0][10]])
    pos = torch.tensor([10, 57, 58, 11])  # the last one: a pair off every sequence (almost surely)
    cont = table(roots, pos)
    assert cont[0].tolist() == seqs[0][11:17]
    assert cont[1].tolist() == seqs[3][58:60] + [(seqs[3][57] + 1 + j) % CV for j in range(2, 6)]  # past the end
    assert cont[2].tolist() == seqs[5][59:60] + [(seqs[5][58] + 1 + j) % CV for j in range(1, 6)]
    if all(q[11] != int(roots[3]) for q in seqs):
        assert cont[3].tolist() == [(int(roots[3]) + 1 + j) % CV for j in range(6)]
    # the first sequence holding a pair wins
    dup = ReplayTable([[3, 4, 5, 6], [3, 4, 9, 9]], vocab=V, depth=2, device="cpu")
    assert dup(torch.tensor([4]), torch.tensor([1])).tolist() == [[5, 6]] and len(dup) == 4  # (2, 5) and (2, 9)


def test_replay_oracle_equals_the_successor_oracle_on_a_successor_walk():
    succ = _succ()
    roots, pos = _inputs(64)
    seqs = []
    for r, p in zip(roots.tolist(), pos.tolist()):  # the walk of root r placed at position p
        walk = [r]
        for _ in range(20):
            walk.append(int(succ[walk[-1]]))
        seqs.append([0] * p + walk)
    kw = dict(seed=3, block_size=8, topk=4, budget=64, max_accept=7, device="cpu")
    a = DraftOracle(succ.tolist(), **kw)(roots, pos)
    b = DraftOracle(replay=seqs, vocab=V, **kw)(roots, pos)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("depth,topk,budget", [(7, 4, 64), (15, 8, 64)])
def test_replay_trees_accept_the_plan_on_a_context_dependent_target(depth, topk, budget):
    """The replay oracle on sequences no successor map explains: walking each built tree against the
    sequence (a node's target is the next sequence token while its path follows the sequence) accepts
    exactly the plan's cut, capped where the sequence ends, through the planned sibling."""
    seqs = _context_sequences(length=40)
    g = DDTreeConfig(budget=budget, topk=topk, block_size=depth + 1)
    oracle = DraftOracle(replay=seqs, vocab=CV, seed=3, block_size=g.block_size, topk=topk, budget=budget,
                         max_accept=g.max_depth, device="cpu")
    picks = [(i, p) for i in range(len(seqs)) for p in range(4, 39, 3)]
    roots = torch.tensor([seqs[i][p] for i, p in picks])
    pos = torch.tensor([p for _, p in picks])
    lp, ids = oracle(roots, pos)
    plan = oracle_plan(roots, pos, seed=3, max_accept=g.max_depth, max_rank=oracle.max_rank)
    tree = build_tree(lp, ids, budget)
    tokens = fill_root(tree, roots)
    branched = 0
    for n, (i, p) in enumerate(picks):
        seq, parents = seqs[i], tree.parents[n]
        depth_of, on_path, target_next = {0: 0}, {0: True}, {}
        for r in range(tree.parents.shape[1]):
            if r and bool(tree.valid[n, r]):
                par = int(parents[r])
                depth_of[r] = depth_of[par] + 1
                k = p + depth_of[r]
                on_path[r] = on_path[par] and k < len(seq) and int(tokens[n, r]) == seq[k]
        for r, d in depth_of.items():
            k = p + d + 1
            target_next[r] = seq[k] if on_path[r] and k < len(seq) else -1
        rows, _ = accept_walk(tokens[n], parents, tree.valid[n], [target_next.get(r, -1) for r in
                                                                    range(tree.parents.shape[1])])
        a, b, rank = int(plan.cut[n]), int(plan.branch_depth[n]), int(plan.branch_rank[n])
        assert len(rows) - 1 == min(a, len(seq) - 1 - p), (n, len(rows) - 1, a, p)
        if b and b < len(rows):
            assert int(tokens[n, rows[b]]) == int(ids[n, b - 1, rank]) and rank > 0
            branched += 1
    assert branched > len(picks) // 3, branched


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


def test_hook_env_parsing(tmp_path):
    assert HookEnv.from_env({}) == HookEnv() and not HookEnv().any
    spec = tmp_path / "oracle.json"
    spec.write_text("{}")
    env = HookEnv.from_env({"DDTREE_TEST_DRAFT_ORACLE": str(spec), "DDTREE_TEST_VERIFY_DUMP": " /x ",
                            "DDTREE_TEST_VERIFY_DUMP_ROUNDS": "7", "DDTREE_TEST_CORRUPT_MASK": "causal"})
    assert (env.draft_oracle, env.verify_dump, env.verify_dump_rounds, env.corrupt_mask) == (str(spec), "/x", 7, "causal")
    assert env.any and HookEnv.from_env({"DDTREE_TEST_REVERSE_RANKS": "1"}).reverse_ranks
    assert not HookEnv.from_env({"DDTREE_TEST_REVERSE_RANKS": "0"}).any
    assert HookEnv.from_env({"DDTREE_TEST_CYCLE_BUDGETS": "1"}).cycle_budgets
    for bad, match in (({"DDTREE_TEST_DRAFT_ORACLE": str(spec), "DDTREE_TEST_REVERSE_RANKS": "1"}, "exclude each other"),
                       ({"DDTREE_TEST_DRAFT_ORACLE": str(tmp_path / "missing.json")}, "not a file"),
                       ({"DDTREE_TEST_CORRUPT_MASK": "random"}, "modes are"),
                       ({"DDTREE_TEST_VERIFY_DUMP_ROUNDS": "0"}, ">= 1"),
                       ({"DDTREE_TEST_REVERSE_RANKS": "maybe"}, "use 1 or 0"),
                       ({"DDTREE_TEST_CYCLE_BUDGETS": "yes"}, "use 1 or 0")):
        with pytest.raises(ValueError, match=match):
            HookEnv.from_env(bad)


def test_plugin_env_helper(tmp_path):
    base = {"PYTHONPATH": "/a:/b", "DDTREE_TEST_REVERSE_RANKS": "1", "SGLANG_PLUGINS": "ddtree"}
    env = plugin_env(verify_dump=str(tmp_path), corrupt_mask="causal", base=base)
    assert env["PYTHONPATH"].split(os.pathsep) == [PLUGIN_DIR, "/a", "/b"]
    assert env["DDTREE_TEST_REVERSE_RANKS"] == "" and env["DDTREE_TEST_VERIFY_DUMP"] == str(tmp_path)
    assert env["SGLANG_PLUGINS"] == "ddtree,ddtree_test"
    assert HookEnv.from_env(dict(base, **env)) == HookEnv(verify_dump=str(tmp_path), corrupt_mask="causal")
    assert "SGLANG_PLUGINS" not in plugin_env(base={})
    with pytest.raises(ValueError, match="exclude"):
        plugin_env(reverse_ranks=True, draft_oracle=__file__, base={})
    assert without_test_vars(dict(base, DDTREE_TEST_VERIFY_DUMP="x")) == {"PYTHONPATH": "/a:/b",
                                                                          "SGLANG_PLUGINS": "ddtree"}
    assert os.path.isfile(os.path.join(PLUGIN_DIR, "ddtree_test_hooks-0.0.0.dist-info", "entry_points.txt"))


def test_loader(tmp_path):
    spec = tmp_path / "oracle.json"
    spec.write_text(json.dumps({"successor": _succ().tolist(), "seed": 4}))
    g = DDTreeConfig(budget=64, topk=4, block_size=8)
    oracle = load_draft_oracle(str(spec), g, vocab_size=V, device="cpu")
    assert (oracle.seed, oracle.depth, oracle.topk, oracle.max_accept, oracle.max_rank) == (4, 7, 4, 7, 3)
    assert "branch ranks 1..3" in oracle.describe()
    with pytest.raises(ValueError, match="vocabulary only"):
        load_draft_oracle(str(spec), g, vocab_size=V - 1, device="cpu")
    spec.write_text(json.dumps({"replay": [[1, 2, 3, 4], [5, 6]], "vocab_size": V, "seed": 2}))
    replay = load_draft_oracle(str(spec), g, vocab_size=V, device="cpu")
    assert replay.vocab_size == V and replay.seed == 2 and "replay of 4 (position, token) pairs" in replay.describe()
    with pytest.raises(ValueError, match="vocabulary only"):
        load_draft_oracle(str(spec), g, vocab_size=V - 1, device="cpu")
    bad = tmp_path / "bad.json"
    for content in ({"successor": [0, 5]}, {"seed": 1}, {"successor": [0, "a"]}, {"replay": [[1, 2]]},
                    {"replay": [[1, V]], "vocab_size": V}, {"replay": [], "vocab_size": V},
                    {"replay": [[1, "a"]], "vocab_size": V}):
        bad.write_text(json.dumps(content))
        with pytest.raises(ValueError):
            load_draft_oracle(str(bad), g, vocab_size=V, device="cpu")


# ---- the plugin's hooks ---------------------------------------------------------------------------
def test_register_installs_only_what_is_asked(monkeypatch, tmp_path):
    """register() with no DDTREE_TEST_* variable registers no hook; with some, exactly those (AFTER)."""
    import ddtree_test_hooks
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    calls = []
    monkeypatch.setattr(HookRegistry, "register", classmethod(lambda cls, *a, **k: calls.append(a)))
    for var in TEST_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(ddtree_test_hooks, "_registered", None)
    ddtree_test_hooks.register()
    ddtree_test_hooks.register()
    assert calls == []
    monkeypatch.setattr(ddtree_test_hooks, "_registered", None)
    monkeypatch.setenv("DDTREE_TEST_REVERSE_RANKS", "1")
    monkeypatch.setenv("DDTREE_TEST_VERIFY_DUMP", str(tmp_path))
    ddtree_test_hooks.register()
    ddtree_test_hooks.register()  # idempotent
    assert calls == [("sglang_ddtree.worker.worker.DDTreeWorker._draft", test_hooks.after_draft_reverse_ranks,
                      HookType.AFTER),
                     ("sglang_ddtree.worker.worker.DDTreeWorker._verify", test_hooks.after_verify_dump,
                      HookType.AFTER)]
    monkeypatch.setattr(ddtree_test_hooks, "_registered", None)


def _fake_worker(config):
    """A stand-in with the attributes the hooks read (a fake: checks the hooks, not the worker)."""
    mc = types.SimpleNamespace(vocab_size=V)
    return types.SimpleNamespace(config=config, device="cpu", ps=types.SimpleNamespace(tp_rank=0),
                                 target_worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(model_config=mc)),
                                 server_args=types.SimpleNamespace(attention_backend="triton"))


def test_draft_hooks(tmp_path):
    spec = tmp_path / "oracle.json"
    succ = _succ()
    spec.write_text(json.dumps({"successor": succ.tolist(), "seed": 3}))
    test_hooks.configure(HookEnv(draft_oracle=str(spec)))
    cfg = DDTreeConfig(budget=64, topk=4, block_size=8)
    worker = _fake_worker(cfg)
    roots, pos = _inputs(6)
    batch, draft_input = types.SimpleNamespace(seq_lens=pos), types.SimpleNamespace(bonus_tokens=roots)
    drafted = (torch.zeros(6, 7, 4), torch.zeros(6, 7, 4, dtype=torch.int64))
    lp, ids = test_hooks.after_draft_oracle(drafted, worker, batch, draft_input, 6, None)
    want = DraftOracle(succ.tolist(), seed=3, block_size=8, topk=4, budget=64, max_accept=cfg.max_depth,
                       device="cpu")(roots, pos)
    assert torch.equal(lp, want[0]) and torch.equal(ids, want[1])
    cached = worker._ddtree_test_oracle
    test_hooks.after_draft_oracle(drafted, worker, batch=batch, draft_input=draft_input, bs=6, host=None)
    assert worker._ddtree_test_oracle is cached  # built once per worker
    legacy = _fake_worker(None)  # a worker that still calls its round config .geometry
    legacy.geometry = cfg
    assert torch.equal(test_hooks.after_draft_oracle(drafted, legacy, batch, draft_input, 6, None)[1], want[1])
    ids = torch.arange(24).view(1, 6, 4)
    out = test_hooks.after_draft_reverse_ranks((drafted[0][:1, :6], ids), worker, batch, draft_input, 1, None)
    assert out[1].tolist() == ids.flip(-1).tolist() and out[0] is not None


def test_verify_dump_hook(tmp_path):
    test_hooks.configure(HookEnv(verify_dump=str(tmp_path / "dump"), verify_dump_rounds=2))
    worker, bs, n, vocab = _fake_worker(DDTreeConfig(budget=3, topk=2, block_size=4)), 2, 4, 11
    verify_input = types.SimpleNamespace(
        draft_token_num=n, draft_token=torch.arange(bs * n), positions=torch.arange(bs * n) + 5,
        retrieve_next_token=torch.tensor([[1, 3, -1, -1], [1, -1, -1, -1]]),
        retrieve_next_sibling=torch.tensor([[-1, 2, -1, -1], [-1, -1, -1, -1]]))
    batch = types.SimpleNamespace(reqs=[types.SimpleNamespace(rid="a"), types.SimpleNamespace(rid="b")],
                                  seq_lens=torch.tensor([5, 9]))
    exact = torch.randn(bs * n + 3, vocab).to(torch.bfloat16).float()  # 3 padded rows (CUDA-graph bs)
    for k in range(3):
        logits = exact if k == 0 else exact + 1e-3  # round 1: not bf16-exact, kept as float32
        out = types.SimpleNamespace(next_token_logits=logits)
        assert test_hooks.after_verify_dump((out, None, k == 0), worker, batch, verify_input, None, None, 0) is None
    files = sorted(os.listdir(tmp_path / "dump"))
    assert files == ["round_000.pt", "round_001.pt"]  # only the first verify_dump_rounds rounds
    r0, r1 = (torch.load(tmp_path / "dump" / f, weights_only=True) for f in files)
    assert r0["rids"] == ["a", "b"] and r0["n"] == n and r0["prefix_lens"].tolist() == [5, 9]
    assert r0["tokens"].tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]] and r0["positions"].shape == (bs, n)
    assert r0["next_token"].tolist() == verify_input.retrieve_next_token.tolist()
    assert r0["logits"].dtype == torch.bfloat16 and torch.equal(r0["logits"].float().view(-1, vocab), exact[: bs * n])
    assert r1["logits"].dtype == torch.float32 and r0["cuda_graph"] and not r1["cuda_graph"]
    assert r0["attention_backend"] == "triton" and (r0["round"], r1["round"]) == (0, 1)


def test_corrupt_topology_hook():
    from ddtree_test_hooks import verify_check

    test_hooks.configure(HookEnv(corrupt_mask="causal"))
    tree = types.SimpleNamespace(token_ids=torch.zeros(2, 3, dtype=torch.int64))
    prefix = torch.tensor([2, 1])
    mask = torch.zeros(3 * (2 + 3) + 3 * (1 + 3), dtype=torch.bool)
    out = test_hooks.after_verify_topology_corrupt((mask, "pos", "idx", "next", "sib"), tree, prefix, 99)
    assert out[1:] == ("pos", "idx", "next", "sib") and test_hooks._STATE["corrupted"] == 1
    assert torch.equal(verify_check.tree_part(out[0], prefix, 3), torch.ones(2, 3, 3, dtype=torch.bool).tril())
    assert not mask.any(), "the hook must not write into the worker's mask buffer"


def test_sglang_loads_the_test_plugin(tmp_path):
    """For real (no fakes), in a fresh process with ``_test_plugin_env``'s environment: SGLang's
    ``load_plugins()`` discovers the ``ddtree_test`` entry point and applies its hooks to the worker
    module; the worker's ``verify_topology`` (the tree package's CPU path) then returns a mask whose tree
    part is causal over rows, prefix columns untouched. (The production plugin loads alongside.)"""
    script = r"""
import json, sys, torch
from importlib.metadata import entry_points
eps = {ep.name: ep.value for ep in entry_points(group="sglang.srt.plugins")}
from sglang.srt.plugins import load_plugins
load_plugins()
import sglang_ddtree.worker.worker as w
from sglang_ddtree.tree.reference import build_tree_torch, build_verify_topology_torch
from ddtree_test_hooks import verify_check
lp = torch.tensor([[[-0.1, -0.2], [-0.3, -0.4]]] * 2)
ids = torch.tensor([[[5, 6], [7, 8]]] * 2)
tree = build_tree_torch(lp, ids, 4)
prefix = torch.tensor([3, 2])
mask = w.verify_topology(tree, prefix, 5)[0]
clean = build_verify_topology_torch(tree, prefix, 5).custom_mask
print("RESULT " + json.dumps(dict(
    eps=eps, draft=hasattr(w.DDTreeWorker._draft, "__wrapped__"), verify=hasattr(w.DDTreeWorker._verify, "__wrapped__"),
    topology=hasattr(w.verify_topology, "__wrapped__"),
    causal=bool(torch.equal(verify_check.tree_part(mask, prefix, 5), torch.ones(2, 5, 5, dtype=torch.bool).tril())),
    clean_differs=bool(not torch.equal(verify_check.tree_part(clean, prefix, 5), torch.ones(2, 5, 5, dtype=torch.bool).tril())),
    rest_same=bool(torch.equal(mask | verify_check.tree_part_mask(prefix, 5, mask.numel()), clean | verify_check.tree_part_mask(prefix, 5, mask.numel()))))))
"""
    env = process_env(reverse_ranks=True, verify_dump=str(tmp_path / "dump"), corrupt_mask="causal")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env,
                          cwd=str(tmp_path))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-6000:]
    res = json.loads(lines[-1][len("RESULT "):])
    assert res["eps"].get("ddtree_test") == "ddtree_test_hooks:register", res["eps"]
    assert res["draft"] and res["verify"] and res["topology"], res
    assert res["causal"] and res["clean_differs"] and res["rest_same"], res
    assert "DDTREE TEST HOOKS REGISTERED" in proc.stderr + proc.stdout


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


def test_cycle_budgets_hook_changes_the_width_every_round():
    from ddtree_test_hooks import hooks as test_hooks
    from ddtree_test_hooks import planned_hooks
    from ddtree_test_hooks.env import HookEnv

    assert test_hooks.cycle_order((0, 1, 3, 7, 15, 31, 63)) == [0, 63, 1, 31, 3, 15, 7]
    auto = type("Auto", (), {"budgets": (0, 1, 3, 7, 15)})()
    test_hooks.configure(HookEnv(cycle_budgets=True))
    picks = [test_hooks.after_choose_cycle(63, auto, 8) for _ in range(7)]
    assert picks == [0, 15, 1, 7, 3, 0, 15]
    assert all(a != b for a, b in zip(picks, picks[1:]))
    assert planned_hooks(HookEnv(cycle_budgets=True)) == [
        ("sglang_ddtree.worker.widths.AutoWidth.choose", test_hooks.after_choose_cycle)]
def test_hybrid_fault_hooks_parse_register_and_act(monkeypatch):
    """DDTREE_TEST_HYBRID_FAULT: parsed, registered on exactly its target, and each hook returns its fault."""
    from sglang.srt.plugins.hook_registry import HookType

    assert HookEnv.from_env({"DDTREE_TEST_HYBRID_FAULT": "chain_commit"}).any
    with pytest.raises(ValueError, match="modes are chain_commit, reversed_siblings"):
        HookEnv.from_env({"DDTREE_TEST_HYBRID_FAULT": "other"})
    targets = {"chain_commit": ("sglang_ddtree.worker.hybrid.last_accepted_rows",
                                test_hooks.after_last_accepted_rows_chain),
               "reversed_siblings": ("sglang_ddtree.worker.worker.verify_topology",
                                     test_hooks.after_verify_topology_reverse_siblings)}
    for mode, (target, fn) in targets.items():
        assert registrations(monkeypatch, {"DDTREE_TEST_HYBRID_FAULT": mode}) == [(target, fn, HookType.AFTER)]
        import importlib

        module, name = target.rsplit(".", 1)
        assert callable(getattr(importlib.import_module(module), name))  # the target exists
    acc = torch.tensor([3, 1], dtype=torch.int32)
    assert test_hooks.after_last_accepted_rows_chain(None, torch.zeros(8), acc, 4).tolist() == [2, 0]
    parents = torch.tensor([[-1, 0, 0, 1, 1, 0, -1]])
    result = ("mask", "pos", "idx", None, None)
    out = test_hooks.after_verify_topology_reverse_siblings(result, types.SimpleNamespace(parents=parents), None)
    assert out[:3] == ("mask", "pos", "idx")
    assert out[3].tolist() == [[5, 4, -1, -1, -1, -1, -1]]  # first child = the highest child row
    assert out[4].tolist() == [[-1, -1, 1, -1, 3, 2, -1]]  # 5 -> 2 -> 1 and 4 -> 3
