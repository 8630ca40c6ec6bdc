"""GPU: every tree node's verify logits are the target's logits for its root path run as a plain sequence.

Sharp-model parity (test_worker_gpu.py) cannot catch a wrong tree mask: attention barely moves those logits.
Here the target is the shipped trained tiny pair (its attention depends on context) and DDTREE runs on
SGLang's triton, flashinfer and fa3 backends, CUDA graphs on, 12 prompts in one batch, greedy, 64 new
tokens. The TEST-ONLY plugin (test/_test_plugin, DDTREE_TEST_VERIFY_DUMP) saves the first DUMP_ROUNDS
rounds' trees and verify logits. For every row of every saved tree, the float32 reference Qwen3
(``sglang_ddtree.reference``) on the GPU gives the next-token log-softmax after (prompt + output)[:P] + the
row's root path (root .. row; a pad row: its own token) run as ONE plain causal sequence; P is the request's
prefix length that round, and (prompt + output)[P] must equal the recorded root. Per row, the error is
max |engine - reference| log-softmax over the candidates (the reference's top-8 and the engine's top-8).
Every VALID row (root and real nodes) <= NODE_TOL, and over all valid rows of an engine p99 <= P99_TOL and
median <= MEDIAN_TOL. Pad rows (no retrieve link reaches them, never accepted, their KV never committed, their
outputs never read) are reported but not asserted: triton and flashinfer apply the FULL_MASK to them (they see
the prefix and themselves), while fa3 at topk 1 runs its chain verify (plain causal attention over the rows),
where pads also see the rows before them. Every valid row precedes every pad row (the tree package's row order),
so under either no valid row can see a pad.

Tolerances (log-prob units), from the H200 run of 2026-12-01 (benchmark/results/verify_logits_h200_session5.json):
over 9 engines (triton / flashinfer / fa3 x b15k8 / b64k8 / b64k1, 720-3,072 valid rows each) the valid rows'
error had median 0.045-0.054, p99 0.121-0.148 and max 0.168-0.358 (one flashinfer row at 0.358, the next
0.243): bf16 (the engine keeps weights, activations and the LM head's output in bf16; logits of up to ~22 sit
on a 2^-4 .. 2^-3 grid) against the float32 reference. A CPU emulation (the reference wholly in bf16, 2,916
rows) had given max 0.234, median 0.062. NODE_TOL = 0.5, P99_TOL = 0.2, MEDIAN_TOL = 0.12. The causal-over-rows
control (each row also sees the rows just before it) measured a median of 6.2 and p99 17.2 on the same run.

Engines (one each, all in ONE subprocess, ``python this_file.py --run PLAN``, since a dying scheduler takes its
parent with it), per backend:
  b15k8, b64k8  budget 15 / 64, topk 8: trees must branch (a row with >= 2 children) at >= 2 distinct depths;
  b64k1         budget 64, topk 1: a 15-node chain + 49 pad rows per tree, every tree must have pads. (With
                the 15-deep drafter a topk-2 tree has no pads at budget <= 1024: 2 + 4 + ... + 32 = 62 nodes
                by depth 5.)
  control       triton b64k8 with DDTREE_TEST_CORRUPT_MASK=causal: the check must FAIL; in each request's
                first round (prefix KV from prefill, still clean) the rows the corruption changes have a
                median error > 5 x NODE_TOL and the rows it cannot change (rows 0..i a chain) stay <= NODE_TOL.
fa3 is skipped only when ``sgl_kernel.flash_ops`` does not import (its library is staged separately).
About 7 minutes on an H200 with a warm JIT cache (10 engine starts of ~30-40 s, one ``import sglang``); only the
engines of the selected tests start, so ``-k "triton or corrupted"`` (4 engines incl. the control),
``-k flashinfer`` and ``-k fa3`` (3 each) split it into ~2-3 minute runs.
DDTREE_TEST_REPORT_DIR=<dir>: each test also writes verify_logits_<engine>.json there (error distribution,
tree statistics). The CPU tests at the bottom hold the comparison functions (``ddtree_test_hooks.verify_check``)
against hand-made trees and masks and against a float32 tree verify of the reference itself.

    python -m pytest -m gpu test/worker/test_verify_logits_gpu.py -v -s
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
import types

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from _gpu_backend import fa3_status  # noqa: E402
from _test_plugin_env import plugin_env  # noqa: E402  (also puts test/_test_plugin on sys.path)

from ddtree_test_hooks import verify_check as vc  # noqa: E402

NODE_TOL, P99_TOL, MEDIAN_TOL, CANDIDATES = 0.5, 0.2, 0.12, 8
CONTROL_FACTOR = 3.5  # the control's changed rows: median > 3.5 x NODE_TOL = 1.75 (measured: ~6)
BACKENDS = ("triton", "flashinfer", "fa3")
CONFIGS = {"b15k8": (15, 8), "b64k8": (64, 8), "b64k1": (64, 1)}
CONTROL = "control_triton_b64k8"
NUM_PROMPTS, MAX_NEW_TOKENS, DUMP_ROUNDS = 12, 64, 4
ENGINE = dict(dtype="bfloat16", mem_fraction_static=0.3, context_length=1024, max_total_tokens=32768,
              sampling_backend="pytorch", cuda_graph_max_bs_decode=NUM_PROMPTS, disable_overlap_schedule=True,
              log_level="warning")


def engine_name(backend: str, config: str) -> str:
    return f"{backend}_{config}"


def make_plan(tmp_dir: str, target: str, draft: str, prompts, backends, only=None) -> dict:
    """Engines in start order (the control after triton's, fa3 last); ``only``: names to keep (None: all)."""
    engines = []
    for backend in backends:
        for config, (budget, topk) in CONFIGS.items():
            engines.append(dict(name=engine_name(backend, config), budget=budget, topk=topk, backend=backend, corrupt=""))
        if backend == "triton":
            engines.append(dict(name=CONTROL, budget=64, topk=8, backend="triton", corrupt="causal"))
    engines = [e for e in engines if only is None or e["name"] in only]
    for e in engines:
        e["dir"] = os.path.join(tmp_dir, e["name"])
        e["engine"] = dict(ENGINE, model_path=target, speculative_algorithm="DDTREE", speculative_draft_model_path=draft,
                           speculative_ddtree_budget=e["budget"], speculative_ddtree_topk=e["topk"],
                           attention_backend=e["backend"])
    return dict(prompts=prompts, engines=engines)


# ---- engine side (a script: ``python test_verify_logits_gpu.py --run PLAN``) ----------------------
def run_plan(plan_path: str) -> None:
    """Start each planned engine with the dump hook (and the control's corruption), generate, save
    ``<dir>/run.json`` (rid -> prompt, output; timings; or the error) as soon as the engine is done."""
    with open(plan_path) as f:
        plan = json.load(f)
    import sglang

    params = dict(temperature=0.0, max_new_tokens=MAX_NEW_TOKENS, ignore_eos=True)
    for item in plan["engines"]:
        os.makedirs(item["dir"], exist_ok=True)
        hooks = plugin_env(verify_dump=os.path.join(item["dir"], "dump"), verify_dump_rounds=DUMP_ROUNDS,
                           corrupt_mask=item["corrupt"])
        hooks.pop("PYTHONPATH")  # already on this process's sys.path, which the scheduler copies
        saved = {k: os.environ.get(k) for k in hooks}
        os.environ.update(hooks)  # before the Engine: its spawned scheduler inherits the variables
        rec, t0 = dict(name=item["name"]), time.time()
        try:
            engine = sglang.Engine(**item["engine"])
            rec["start_s"] = round(time.time() - t0, 1)
            try:
                rids = [f"{item['name']}-{i}" for i in range(len(plan["prompts"]))]
                res = engine.generate(input_ids=plan["prompts"], sampling_params=params, rid=rids)
                rec["requests"] = {rid: dict(prompt=p, output=list(r["output_ids"]),
                                             accept_length=r["meta_info"].get("spec_accept_length"))
                                   for rid, p, r in zip(rids, plan["prompts"], res)}
            finally:
                engine.shutdown()
        except Exception as e:  # record it and go on with the next engine
            rec["error"] = f"{type(e).__name__}: {e}"
            rec["traceback"] = traceback.format_exc()[-4000:]
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        rec["total_s"] = round(time.time() - t0, 1)
        with open(os.path.join(item["dir"], "run.json"), "w") as f:
            json.dump(rec, f)
        print(f"[verify-logits] {item['name']}: {rec.get('error', 'ok')} ({rec['total_s']} s)", flush=True)


# ---- test side -----------------------------------------------------------------------------------
def selected_engines(items) -> set:
    """Engines the selected tests of this module need (so ``-k triton`` starts only triton's engines)."""
    names = set()
    for item in items:
        if os.path.abspath(str(item.fspath)) != os.path.abspath(__file__):
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "backend" in params and "config" in params:
            names.add(engine_name(params["backend"], params["config"]))
        elif item.originalname == "test_corrupted_mask_fails_the_check":
            names.add(CONTROL)
    return names


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    from transformers import AutoTokenizer

    from _features_helpers import subprocess_env
    from sglang_ddtree.fixtures import tiny_pair_path

    sys.path.insert(0, os.path.join(ROOT, "benchmark"))
    from bench_e2e import PROMPTS

    tmp = tmp_path_factory.mktemp("verify_logits")
    pair = tiny_pair_path()
    tok = AutoTokenizer.from_pretrained(pair.target)
    prompts = [tok.encode(p) for p in PROMPTS[:NUM_PROMPTS]]
    selected = selected_engines(request.session.items)
    fa3_ok, fa3_reason = fa3_status() if any(n.startswith("fa3_") for n in selected) else (False, "fa3 not selected")
    backends = [b for b in BACKENDS if b != "fa3" or fa3_ok]
    plan = make_plan(str(tmp), pair.target, pair.draft, prompts, backends, selected)
    plan_path = tmp / "plan.json"
    plan_path.write_text(json.dumps(plan))
    env = subprocess_env(str(tmp))  # the production plugin's entry point in every SGLang process
    env.update(plugin_env(base=env))  # + the test plugin (no hook variables: the runner sets them per engine)
    log_path = tmp / "engines.log"
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--run", str(plan_path)], env=env,
                              stdout=log, stderr=subprocess.STDOUT, timeout=1800, cwd=ROOT)
    print(f"[verify-logits] engines: rc {proc.returncode} in {time.time() - t0:.0f} s; log {log_path}")
    return dict(plan={e["name"]: e for e in plan["engines"]}, log=log_path, rc=proc.returncode,
                fa3_skip="" if fa3_ok else fa3_reason, checked={})


@pytest.fixture(scope="module")
def reference():
    from sglang_ddtree.fixtures import tiny_pair_path
    from sglang_ddtree.reference.qwen3 import Qwen3ForCausalLM

    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # a true float32 reference
    yield Qwen3ForCausalLM.from_pretrained(tiny_pair_path().target, dtype=torch.float32).to("cuda").eval()
    torch.backends.cuda.matmul.allow_tf32 = saved


def _log_tail(runs, n=6000) -> str:
    if not os.path.exists(runs["log"]):
        return f"(no log at {runs['log']})"
    with open(runs["log"], errors="replace") as f:
        return f.read()[-n:]


def checked(runs, reference, name: str):
    """(nodes, errors [M], summary) of one engine's dumps, computed once."""
    if name in runs["checked"]:
        return runs["checked"][name]
    item = runs["plan"][name]
    run_path = os.path.join(item["dir"], "run.json")
    assert os.path.exists(run_path), (f"{name}: the engine runner never finished it (rc {runs['rc']}; a crash "
                                      f"takes the later engines with it). Log tail:\n{_log_tail(runs)}")
    with open(run_path) as f:
        rec = json.load(f)
    assert "error" not in rec, f"{name}: {rec['error']}\n{rec.get('traceback', '')}\nLog tail:\n{_log_tail(runs)}"
    rounds = vc.load_rounds(os.path.join(item["dir"], "dump"))
    assert rounds, (f"{name}: no verify dump: the test plugin (DDTREE_TEST_VERIFY_DUMP) did not run in the "
                    f"scheduler. Log tail:\n{_log_tail(runs)}")
    requests = {rid: (r["prompt"], r["output"]) for rid, r in rec["requests"].items()}
    nodes = vc.collect_nodes(rounds, requests)
    ref = vc.reference_log_probs(reference, nodes.sequences, next(reference.parameters()).device)
    errors = vc.node_errors(nodes.engine_logits, ref, CANDIDATES)
    pad, depth = torch.tensor(nodes.pad), torch.tensor(nodes.depth)
    summary = dict(
        engine=name, budget=item["budget"], topk=item["topk"], backend=item["backend"], corrupt=item["corrupt"],
        node_tol=NODE_TOL, p99_tol=P99_TOL, median_tol=MEDIAN_TOL, candidates=f"top-{CANDIDATES} of reference and engine",
        all=vc.summarize(errors, NODE_TOL), valid=vc.summarize(errors[~pad], NODE_TOL), roots=vc.summarize(errors[(depth == 0) & ~pad], NODE_TOL),
        nodes=vc.summarize(errors[depth > 0], NODE_TOL), pads=vc.summarize(errors[pad], NODE_TOL),
        by_depth={int(d): vc.summarize(errors[(depth == d) & ~pad], NODE_TOL)["max"] for d in depth[~pad].unique()},
        rounds=nodes.rounds, cuda_graph_rounds=nodes.cuda_graph_rounds, corrupted_rounds=nodes.corrupted_rounds,
        trees=nodes.trees, pad_rows=nodes.pad_rows, branching_rows_by_depth=nodes.branching,
        engine_start_s=rec.get("start_s"),
        mean_accept_length=round(sum(r["accept_length"] or 0 for r in rec["requests"].values()) / len(requests), 3),
    )
    print(f"[verify-logits] {name}: " + json.dumps(summary))
    report_dir = os.environ.get("DDTREE_TEST_REPORT_DIR")
    if report_dir:
        os.makedirs(report_dir, exist_ok=True)
        with open(os.path.join(report_dir, f"verify_logits_{name}.json"), "w") as f:
            json.dump(summary, f, indent=1)
    runs["checked"][name] = (nodes, errors, summary)
    return runs["checked"][name]


def _worst(nodes, errors, k=8) -> str:
    """The k largest valid-row errors (pads are not asserted)."""
    order = torch.where(torch.tensor(nodes.pad), -1.0, errors).argsort(descending=True)[:k].tolist()
    return "; ".join(f"{nodes.where[i]} (depth {nodes.depth[i]}{', pad' if nodes.pad[i] else ''}): "
                     f"{float(errors[i]):.3f}" for i in order)


@pytest.mark.gpu
@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_tree_verify_logits_equal_plain_sequences(runs, reference, backend, config):
    if backend == "fa3" and runs["fa3_skip"]:
        pytest.skip(runs["fa3_skip"])
    name = engine_name(backend, config)
    nodes, errors, s = checked(runs, reference, name)
    budget, topk = CONFIGS[config]
    assert s["rounds"] == DUMP_ROUNDS and s["cuda_graph_rounds"] == s["rounds"], (
        f"{name}: {s['cuda_graph_rounds']} of {s['rounds']} recorded rounds ran the target-verify CUDA graph")
    assert s["corrupted_rounds"] == 0 and s["trees"] >= NUM_PROMPTS, s
    assert errors.shape[0] == s["trees"] * (budget + 1)
    if topk > 1:
        depths = sorted(d for d, c in s["branching_rows_by_depth"].items() if c > 0)
        assert len(depths) >= 2, f"{name}: trees branch at depths {depths} only: {s['branching_rows_by_depth']}"
    else:
        assert s["pad_rows"] >= s["trees"], f"{name}: {s['pad_rows']} pad rows in {s['trees']} trees"
    v = s["valid"]
    assert v["ok"], (f"{name}: {v['over']} of {v['n']} valid rows differ from their plain root-path sequence by "
                     f"more than {NODE_TOL} (log-prob); worst: {_worst(nodes, errors)}")
    assert v["p99"] <= P99_TOL and v["p50"] <= MEDIAN_TOL, f"{name}: valid-row errors p99 / median too high: {v}"


@pytest.mark.gpu
def test_corrupted_mask_fails_the_check(runs, reference):
    """The control: the same comparison on an engine whose FULL_MASK tree part is causal over rows."""
    nodes, errors, s = checked(runs, reference, CONTROL)
    assert s["corrupted_rounds"] >= s["rounds"] > 0, f"the corruption hook did not run every round: {s}"
    assert not s["all"]["ok"], f"a causal-over-rows tree mask passed the check: {s['all']}"
    first, hit = torch.tensor(nodes.first_round), torch.tensor(nodes.affected)
    changed, unchanged = errors[first & hit], errors[first & ~hit]
    assert changed.numel() >= 100 and unchanged.numel() >= NUM_PROMPTS, (changed.numel(), unchanged.numel())
    assert float(changed.median()) > CONTROL_FACTOR * NODE_TOL, (
        f"corrupted rows moved by a median of only {float(changed.median()):.3f}: {vc.summarize(changed, NODE_TOL)}")
    assert float(unchanged.max()) <= NODE_TOL, (
        f"rows the corruption cannot change moved by {float(unchanged.max()):.3f} (the dump or the reference is off)")


# ---- CPU: the comparison functions ---------------------------------------------------------------
# A hand tree: 0 -> {1, 2}; 1 -> {3, 4}; 2 -> {5}; 3 -> {6}; rows 7, 8 pads.
HAND_PARENTS = [-1, 0, 0, 1, 1, 2, 3, -1, -1]
HAND_NEXT = [1, 3, 5, 6, -1, -1, -1, -1, -1]
HAND_SIB = [-1, 2, -1, 4, -1, -1, -1, -1, -1]


def _tree(parents_rows, num_nodes):
    from sglang_ddtree.tree.metadata import Tree

    par = torch.tensor(parents_rows)
    bs, n = par.shape
    dep = torch.zeros_like(par)
    for i in range(n):
        dep[:, i] = torch.where(par[:, i] >= 0, dep.gather(1, par[:, i:i + 1].clamp(min=0))[:, 0] + 1, 0)
    rows = torch.arange(n)[None]
    nn_ = torch.tensor(num_nodes)
    return Tree(token_ids=torch.randint(100, (bs, n), generator=torch.Generator().manual_seed(0)), parents=par,
                depths=dep, scores=torch.zeros(bs, n), valid=rows < nn_[:, None], num_nodes=nn_.to(torch.int32),
                max_depth=int(dep.max()))


def test_parents_from_links_hand_tree_and_production_links():
    from sglang_ddtree.tree.reference import retrieve_indices_torch

    parents, reach = vc.parents_from_links(HAND_NEXT, HAND_SIB)
    assert parents == HAND_PARENTS and reach == [True] * 7 + [False] * 2
    depths = vc.depths_from_parents(parents)
    assert depths == [0, 1, 1, 2, 2, 2, 3, 0, 0]
    tokens = [10, 11, 12, 13, 14, 15, 16, 17, 18]
    assert vc.root_path(tokens, parents, 6) == [10, 11, 13, 16] and vc.root_path(tokens, parents, 5) == [10, 12, 15]
    assert vc.root_path(tokens, parents, 7) == [17] and vc.root_path(tokens, parents, 0) == [10]
    assert vc.branching_by_depth(parents, depths) == {0: 1, 1: 1}
    assert vc.causal_corruption_affects(parents) == [False, False] + [True] * 7
    assert vc.causal_corruption_affects([-1, 0, 1, 2, -1]) == [False, False, False, False, True]
    # the production topology's links of the same tree give back its parents
    tree = _tree([HAND_PARENTS, [-1, 0, 1, 1, 0, 3, -1, -1, -1]], [7, 6])
    _, nxt, sib = retrieve_indices_torch(tree)
    for b in range(2):
        assert vc.parents_from_links(nxt[b].tolist(), sib[b].tolist())[0] == tree.parents[b].tolist()
    for bad_next, bad_sib in (([1, 2, -1], [-1, -1, 1]),  # row 1 reached twice (a sibling cycle back)
                              ([2, -1, -1], [-1, -1, 1]),  # siblings out of order
                              ([0, -1, -1], [-1, -1, -1]),  # the root as its own child
                              ([3, -1, -1], [-1, -1, -1])):  # out of range
        with pytest.raises(ValueError):
            vc.parents_from_links(bad_next, bad_sib)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8])
def test_corrupt_full_mask_rewrites_only_the_tree_part(dtype):
    from sglang_ddtree.tree.reference import full_mask_torch, tree_mask_torch

    tree = _tree([HAND_PARENTS, [-1, 0, 1, 1, 0, 3, -1, -1, -1]], [7, 6])
    prefix, n = torch.tensor([3, 1]), 9
    tm = tree_mask_torch(tree)
    full = full_mask_torch(tm, prefix, 6).to(dtype)  # host bound 6 > 4: trailing bytes past the rows
    assert torch.equal(vc.tree_part(full, prefix, n), tm)
    bad = vc.corrupt_full_mask(full, prefix, n, "causal")
    assert bad.dtype == dtype and bad.shape == full.shape
    assert torch.equal(vc.tree_part(bad, prefix, n), torch.ones(2, n, n, dtype=torch.bool).tril())
    outside = ~vc.tree_part_mask(prefix, n, full.numel())
    assert torch.equal(bad[outside], full[outside]) and int(outside.sum()) == full.numel() - 2 * n * n
    assert not torch.equal(bad, full)
    with pytest.raises(ValueError):
        vc.corrupt_full_mask(full, prefix, n, "random")


def test_plain_context_checks_the_root():
    assert vc.plain_context([5, 6, 7], [8, 9, 10], 4, 9) == [5, 6, 7, 8]
    assert vc.plain_context([5, 6, 7], [8], 3, 8) == [5, 6, 7]
    for p_len, root in ((4, 8), (6, 1), (-1, 5)):
        with pytest.raises(vc.DumpMismatch):
            vc.plain_context([5, 6, 7], [8, 9, 10], p_len, root)


def test_node_errors_and_summary():
    g = torch.Generator().manual_seed(0)
    ref = (torch.randn(4, 50, generator=g) * 3).log_softmax(-1)
    assert float(vc.node_errors(ref + 7.0, ref).max()) < 1e-5  # a logit shift is no error
    eng = ref.clone()
    top = ref.argmax(-1)
    eng[0, top[0]] += 0.5  # the reference's top-1 of row 0 raised by 0.5 (then renormalised)
    low = ref[1].argsort()[:10]  # row 1: tokens far outside both top-8s moved
    eng[1, low] -= 0.3
    err = vc.node_errors(eng, ref, 8)
    assert 0.249 < float(err[0]) < 0.5 and float(err[1]) < 0.01 and float(err[2:].max()) < 1e-5
    wide = torch.cat([eng, torch.full((4, 6), -30.0)], -1)  # an engine vocabulary padded past V
    assert torch.allclose(vc.node_errors(wide, ref, 8), err)
    s = vc.summarize(torch.tensor([0.1, 0.2, 0.5]), 0.35)
    assert (s["n"], s["over"], s["ok"], s["max"]) == (3, 1, False, 0.5) and vc.summarize(torch.tensor([0.1]), 0.35)["ok"]
    assert not vc.summarize(torch.tensor([]), 0.35)["ok"]


def test_reference_log_probs_batches_like_single_sequences():
    from sglang_ddtree.reference.toy import random_target, tiny_target_config

    model = random_target(3, sharp=False, cfg=tiny_target_config(vocab_size=64, hidden_size=32, num_layers=2))
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(64, (int(n),), generator=g).tolist() for n in torch.randint(1, 20, (23,), generator=g)]
    got = vc.reference_log_probs(model, seqs, "cpu", max_batch_tokens=60)  # several chunks
    with torch.no_grad():
        for s, row in zip(seqs, got):
            want = model(torch.tensor([s]), torch.arange(len(s))[None]).logits[0, -1].log_softmax(-1)
            torch.testing.assert_close(row, want, atol=1e-5, rtol=1e-5)


def _fake_dump(model, prompts, outputs, prefix, budget, topk, corrupt=""):
    """One round's dump as the VERIFY hook writes it, with the 'engine' logits from a float32 tree verify of
    the reference model over the production FULL_MASK (``build_verify_topology_torch``), corrupted if asked.
    (A stand-in for the engine: this checks the comparison pipeline, not SGLang.)"""
    from sglang_ddtree.reference.qwen3 import KVCache
    from sglang_ddtree.tree.reference import build_tree_torch, build_verify_topology_torch

    bs, n = len(prompts), budget + 1
    g = torch.Generator().manual_seed(budget + topk)
    lp = (torch.randn(bs, 15, topk, generator=g) - 1.0).sort(-1, descending=True).values.clamp(max=0)
    ids = torch.stack([torch.randperm(model.config.vocab_size, generator=g)[:topk] for _ in range(bs * 15)]).view(bs, 15, topk)
    roots = torch.tensor([(p + o)[int(P)] for p, o, P in zip(prompts, outputs, prefix)])
    tree = build_tree_torch(lp, ids, budget, roots)
    topo = build_verify_topology_torch(tree, prefix, int(prefix.sum()))
    mask = topo.custom_mask if not corrupt else vc.corrupt_full_mask(topo.custom_mask, prefix, n, corrupt)
    logits, start = [], 0
    with torch.no_grad():
        for b in range(bs):
            p_len = int(prefix[b])
            m = mask[start:start + n * (p_len + n)].view(1, n, p_len + n)
            start += n * (p_len + n)
            ctx = torch.tensor([(prompts[b] + outputs[b])[:p_len]])
            cache = KVCache(model.config.num_hidden_layers)
            cache.append(model(ctx, torch.arange(p_len)[None]).kv)
            pos = topo.positions.view(bs, n)[b:b + 1]
            logits.append(model(tree.token_ids[b:b + 1], pos, cache, m).logits[0])
    return dict(format=1, round=0, rids=[f"r{b}" for b in range(bs)], n=n, prefix_lens=prefix,
                tokens=tree.token_ids, positions=topo.positions.view(bs, n), next_token=topo.retrieve_next_token,
                next_sibling=topo.retrieve_next_sibling, logits=torch.stack(logits),
                cuda_graph=True, corrupted_rounds=int(bool(corrupt)), attention_backend="cpu-reference")


@pytest.fixture(scope="module")
def tiny_target():
    from sglang_ddtree.fixtures import tiny_pair_path
    from sglang_ddtree.reference.qwen3 import Qwen3ForCausalLM

    return Qwen3ForCausalLM.from_pretrained(tiny_pair_path().target, dtype=torch.float32)


@pytest.mark.parametrize("budget,topk", [(15, 4), (20, 1)])
def test_pipeline_passes_a_correct_tree_verify_and_fails_a_corrupted_one(tiny_target, budget, topk):
    """The GPU test's comparison on a float32 tree verify of the trained target itself: a correct FULL_MASK
    gives ~0 error on every row (pads included); the causal corruption fails NODE_TOL on the rows it
    changes (branched trees: median > CONTROL_FACTOR x NODE_TOL, as the GPU control requires; a chain: its
    pads) and leaves the others exact."""
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(2, 2048, (int(k),), generator=g).tolist() for k in (9, 17)]
    outputs = [torch.randint(2, 2048, (20,), generator=g).tolist() for _ in prompts]
    prefix = torch.tensor([len(prompts[0]) + 3, len(prompts[1])])
    requests = {f"r{b}": (prompts[b], outputs[b]) for b in range(2)}
    good = vc.collect_nodes([_fake_dump(tiny_target, prompts, outputs, prefix, budget, topk)], requests)
    ref = vc.reference_log_probs(tiny_target, good.sequences, "cpu")
    err = vc.node_errors(good.engine_logits, ref, CANDIDATES)
    assert err.shape[0] == 2 * (budget + 1) and float(err.max()) < 1e-3, vc.summarize(err, NODE_TOL)
    assert (good.pad_rows > 0) == (topk == 1) and (len(good.branching) >= 2) == (topk > 1), (good.pad_rows, good.branching)
    bad = vc.collect_nodes([_fake_dump(tiny_target, prompts, outputs, prefix, budget, topk, "causal")], requests)
    err = vc.node_errors(bad.engine_logits, ref, CANDIDATES)
    hit = torch.tensor(bad.affected)
    assert not vc.summarize(err, NODE_TOL)["ok"] and bad.corrupted_rounds == 1
    if topk > 1:  # branched trees, as in the GPU control
        assert float(err[hit].median()) > CONTROL_FACTOR * NODE_TOL, vc.summarize(err[hit], NODE_TOL)
    else:  # a chain: only the pads change (they also see the chain), each by more than NODE_TOL
        assert hit.tolist() == bad.pad and float(err[hit].min()) > NODE_TOL, vc.summarize(err[hit], NODE_TOL)
    assert float(err[~hit].max()) < 1e-3 and int((~hit).sum()) >= 2


def test_collect_nodes_rejects_inconsistent_dumps(tiny_target):
    prompts, outputs = [[5, 6, 7, 8]], [[9, 10, 11, 12, 13]]
    prefix = torch.tensor([5])
    rec = _fake_dump(tiny_target, prompts, outputs, prefix, 3, 2)
    requests = {"r0": (prompts[0], outputs[0])}
    assert vc.collect_nodes([rec], dict(requests, other=([1], [2]))).trees == 1  # rids not recorded: ignored
    assert vc.collect_nodes([rec], {"x": ([1], [2])}).trees == 0  # recorded rids not asked for: skipped
    with pytest.raises(vc.DumpMismatch, match="root"):
        vc.collect_nodes([rec], {"r0": (prompts[0], [9, 99, 11, 12])})
    moved = dict(rec, positions=rec["positions"] + 1)
    with pytest.raises(vc.DumpMismatch, match="positions"):
        vc.collect_nodes([moved], requests)


def test_plan_and_summary_glue_on_cpu(tiny_target, tmp_path, monkeypatch):
    """The GPU test's own glue (plan, run.json / dump layout, ``checked``'s summary and report) on a dump
    written by ``_fake_dump``: a dry run of the plumbing only; the engine side is not exercised here."""
    plan = make_plan(str(tmp_path), "T", "D", [[1, 2]], ["triton", "fa3"])
    names = [e["name"] for e in plan["engines"]]
    assert names == ["triton_b15k8", "triton_b64k8", "triton_b64k1", CONTROL, "fa3_b15k8", "fa3_b64k8", "fa3_b64k1"]
    item = plan["engines"][0]
    assert item["engine"]["attention_backend"] == "triton" and item["engine"]["speculative_ddtree_budget"] == 15
    assert item["engine"]["cuda_graph_max_bs_decode"] == NUM_PROMPTS and "disable_cuda_graph" not in item["engine"]
    prompts, outputs = [[5, 6, 7, 8], [9, 10, 11]], [[12, 13, 14, 15, 16], [17, 18, 19, 20]]
    rec = _fake_dump(tiny_target, prompts, outputs, torch.tensor([5, 4]), 15, 4)
    rec["rids"] = ["a", "b"]
    os.makedirs(os.path.join(item["dir"], "dump"))
    torch.save(rec, os.path.join(item["dir"], "dump", "round_000.pt"))
    with open(os.path.join(item["dir"], "run.json"), "w") as f:
        json.dump(dict(name=item["name"], start_s=1.0, requests={
            rid: dict(prompt=p, output=o, accept_length=2.0) for rid, p, o in zip("ab", prompts, outputs)}), f)
    monkeypatch.setenv("DDTREE_TEST_REPORT_DIR", str(tmp_path / "report"))
    runs = dict(plan={e["name"]: e for e in plan["engines"]}, log=str(tmp_path / "log"), rc=0, fa3_skip="", checked={})
    assert [e["name"] for e in make_plan(str(tmp_path), "T", "D", [[1]], BACKENDS, {CONTROL, "fa3_b64k1"})["engines"]] \
        == [CONTROL, "fa3_b64k1"]
    fake = lambda name, fspath=__file__, **params: types.SimpleNamespace(  # noqa: E731
        fspath=fspath, originalname=name, callspec=types.SimpleNamespace(params=params) if params else None)
    assert selected_engines([fake("test_tree_verify_logits_equal_plain_sequences", backend="fa3", config="b15k8"),
                             fake("test_corrupted_mask_fails_the_check"), fake("test_other", "/x/test_other.py"),
                             fake("test_plain_context_checks_the_root")]) == {"fa3_b15k8", CONTROL}
    nodes, errors, s = checked(runs, tiny_target, item["name"])
    assert s["all"]["ok"] and s["trees"] == 2 and s["rounds"] == s["cuda_graph_rounds"] == 1 and s["pad_rows"] == 0
    assert s["pads"]["n"] == 0 and s["roots"]["n"] == 2 and s["nodes"]["n"] == 30 and s["mean_accept_length"] == 2.0
    assert json.load(open(tmp_path / "report" / f"verify_logits_{item['name']}.json"))["engine"] == item["name"]
    assert checked(runs, tiny_target, item["name"])[1] is errors  # computed once
    with pytest.raises(AssertionError, match="never finished"):
        checked(runs, tiny_target, CONTROL)


if __name__ == "__main__":  # the engine runner (guarded: SGLang's spawned scheduler re-imports this file)
    if len(sys.argv) == 3 and sys.argv[1] == "--run":
        run_plan(sys.argv[2])
    else:
        sys.exit(f"usage: {sys.argv[0]} --run PLAN.json (normally started by pytest)")
