"""GPU: DDTREE exercises every accept length 0..D and sibling walks at every depth, on purpose.

The "succ" models (``_generated_models.write_succ_pair``: attention and MLP outputs zeroed, so the target's
greedy next token is exactly ``succ[current]``, a table read off the saved weights) and the TEST-ONLY draft
oracle (``ddtree_test_hooks.draft_oracle``, installed on ``DDTreeWorker._draft`` by the test plugin in
test/_test_plugin when DDTREE_TEST_DRAFT_ORACLE is set, see ``_test_plugin_env.py``): each round's draft
top-K is replaced by the root's true continuation placed at planned ranks and cut at a planned depth, a
pure function of (root token, root position, seed). The tree always holds the planned path (budget 64 >=
D * K), so each round accepts exactly its planned number of drafts, through a non-top-1 sibling at the
planned branch depth. Block size L = 8, so D = 7 and accepted drafts per round are 0..7.

Two engines, each in its own subprocess (a dying scheduler takes its parent with it): plain (no
speculation) and DDTREE (budget 64, top-K 4, triton, CUDA graphs, overlap scheduling), same 16 prompts
submitted together, greedy, 128 new tokens, ignore_eos. Checks, one test each so a failure names its cause:
  1. the plain engine follows the successor table (the oracle's premise; if this fails, 3 and 4 mean nothing);
  2. DDTREE output == plain output, token for token;
  3. the oracle was active and the summed per-request accept-length histograms cover every value 0..D;
  4. every request's histogram equals the host replay of the plan (``draft_oracle.replay_rounds``), hence
     the rounds that the replay says walked a non-top-1 sibling at depth d (every d in 1..D) did so.
``test_draft_oracle.py`` replays this exact scenario on CPU and checks that 3 and 4 are then covered.
Expected run time on an H200: about 1.5-2 minutes (two engine start-ups).
"""

import json
import os
import random
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _generated_models import BLOCK_SIZE, VOCAB  # noqa: E402
from _test_plugin_env import plugin_env, without_test_vars  # noqa: E402  (also puts the plugin on sys.path)

pytestmark = pytest.mark.gpu

BUDGET, TOPK, ORACLE_SEED = 64, 4, 0
NUM_PROMPTS, MAX_NEW_TOKENS = 16, 128
MAX_DEPTH = min(BUDGET, BLOCK_SIZE - 1)  # D
ORACLE_BANNER = "DDTREE TEST DRAFT ORACLE ACTIVE"
COMMON = dict(dtype="bfloat16", mem_fraction_static=0.45, context_length=2048, max_total_tokens=65536,
              sampling_backend="pytorch", cuda_graph_max_bs_decode=16, attention_backend="triton",
              log_level="info", decode_log_interval=20)
DDTREE = dict(speculative_algorithm="DDTREE", speculative_ddtree_budget=BUDGET, speculative_ddtree_topk=TOPK)


# ---- the scenario (also replayed on CPU by test_draft_oracle.py) -----------------------------------
def make_prompts(n: int = NUM_PROMPTS, seed: int = 1234):
    """Token-id prompts of 4..24 tokens from ids >= 8 (never <|endoftext|> 0, <|MASK|> 1 or the toy
    attractor 7, whose successors collapse onto the attractor)."""
    g = random.Random(seed)
    return [[g.randrange(8, VOCAB) for _ in range(g.randint(4, 24))] for _ in range(n)]


def successor_chain(prompt, succ, length: int = MAX_NEW_TOKENS):
    """The target's greedy output for ``prompt``: succ[last], succ[succ[last]], ..."""
    out = [succ[prompt[-1]]]
    while len(out) < length:
        out.append(succ[out[-1]])
    return out


def planned_rounds(prompt, output_ids):
    """[(accepted drafts, branch depth, branch rank)] of every round the scheduler counts."""
    from ddtree_test_hooks.draft_oracle import max_branch_rank, replay_rounds

    return replay_rounds(output_ids, len(prompt), MAX_NEW_TOKENS, seed=ORACLE_SEED, max_accept=MAX_DEPTH,
                         max_rank=max_branch_rank(TOPK, BUDGET, MAX_DEPTH))


def histogram(rounds):
    hist = [0] * (MAX_DEPTH + 1)
    for cut, _, _ in rounds:
        hist[cut] += 1
    return hist


def branch_counts(rounds):
    """{depth d: rounds whose accepted path took a non-top-1 sibling at depth d}."""
    counts = {d: 0 for d in range(1, MAX_DEPTH + 1)}
    for cut, depth, rank in rounds:
        if rank > 0 and 1 <= depth <= cut:
            counts[depth] += 1
    return counts


# ---- the engines ---------------------------------------------------------------------------------
ENGINE_SCRIPT = r"""
import json, os, sys


def main():  # guarded: SGLang spawns its scheduler, which re-imports this file as __mp_main__
    flags, prompts = (json.loads(a) for a in sys.argv[1:3])
    import sglang

    engine = sglang.Engine(**flags)
    try:
        greedy = dict(temperature=0.0, max_new_tokens=%d, ignore_eos=True)
        res = engine.generate(input_ids=prompts, sampling_params=greedy)
        out = [dict(output_ids=list(r["output_ids"]), meta_info=r["meta_info"]) for r in res]
    finally:
        engine.shutdown()
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
""" % MAX_NEW_TOKENS


def _run_engine(tmp, name, flags, prompts, env):
    """``env``: variables added to the engine process's environment at its start (PYTHONPATH too, so the
    process and the scheduler it spawns, which copies its sys.path, both find the test plugin)."""
    script = tmp / "run_engine.py"
    script.write_text(ENGINE_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), json.dumps(flags), json.dumps(prompts)],
                          capture_output=True, text=True, timeout=600, env=dict(without_test_vars(), **env))
    log = proc.stdout + proc.stderr
    (tmp / f"{name}.log").write_text(log)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"the {name} engine failed (rc {proc.returncode}); full log: {tmp / (name + '.log')}\n{log[-6000:]}")
    return json.loads(lines[-1][len("RESULT "):]), log


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from _generated_models import successor_table, write_succ_pair

    tmp = tmp_path_factory.mktemp("accept_coverage")
    target, draft = write_succ_pair(str(tmp / "models"))
    succ = successor_table(target)
    oracle_json = tmp / "oracle.json"
    oracle_json.write_text(json.dumps({"successor": succ, "seed": ORACLE_SEED}))
    prompts = make_prompts()
    plain, _ = _run_engine(tmp, "plain", dict(COMMON, model_path=target), prompts, {})
    dd, dd_log = _run_engine(tmp, "ddtree", dict(COMMON, **DDTREE, model_path=target,
                                                 speculative_draft_model_path=draft),
                             prompts, plugin_env(draft_oracle=str(oracle_json)))
    return dict(succ=succ, prompts=prompts, plain=plain, dd=dd, dd_log=dd_log, tmp=tmp)


def test_plain_engine_follows_the_successor_table(runs):
    for i, (prompt, rec) in enumerate(zip(runs["prompts"], runs["plain"])):
        want = successor_chain(prompt, runs["succ"])
        got = rec["output_ids"]
        pos = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), None)
        assert got == want, (
            f"prompt {i}: the plain engine's greedy output leaves the successor table at token {pos} "
            f"(got {got[pos:pos + 4] if pos is not None else got[len(want):]}, table says "
            f"{want[pos:pos + 4] if pos is not None else want[len(got):]}): the succ target is not context-free "
            "in SGLang, so the oracle's premise fails and the coverage tests below are void")


def test_ddtree_output_equals_plain(runs):
    for i, (rec, ref) in enumerate(zip(runs["dd"], runs["plain"])):
        got, want = rec["output_ids"], ref["output_ids"]
        pos = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        assert got == want, (f"prompt {i}: DDTREE (draft oracle) diverges from plain at token {pos}: "
                             f"got {got[max(0, pos - 2):pos + 4]}, plain {want[max(0, pos - 2):pos + 4]}")


def test_oracle_active_and_accept_lengths_cover_every_depth(runs):
    assert ORACLE_BANNER in runs["dd_log"], (
        f"no '{ORACLE_BANNER}' warning in the DDTREE engine log ({runs['tmp'] / 'ddtree.log'}): "
        "the test plugin's DDTREE_TEST_DRAFT_ORACLE hook did not run in the scheduler process")
    total = [0] * (MAX_DEPTH + 1)
    for i, rec in enumerate(runs["dd"]):
        meta = rec["meta_info"]
        hist = meta.get("spec_correct_drafts_histogram")
        assert hist and sum(hist) == meta["spec_verify_ct"], (i, meta)
        assert len(hist) <= MAX_DEPTH + 1, (f"prompt {i}: accepted more than D = {MAX_DEPTH} drafts", hist)
        for a, n in enumerate(hist):
            total[a] += n
    print(f"accepted drafts per round, 0..{MAX_DEPTH}: {total}")
    missing = [a for a, n in enumerate(total) if n == 0]
    assert not missing, f"no round accepted {missing} drafts; histogram over 0..{MAX_DEPTH}: {total}"


def test_rounds_follow_the_plan_and_branch_at_every_depth(runs):
    planned_total = {d: 0 for d in range(1, MAX_DEPTH + 1)}
    for i, (prompt, rec) in enumerate(zip(runs["prompts"], runs["dd"])):
        rounds = planned_rounds(prompt, successor_chain(prompt, runs["succ"]))
        meta = rec["meta_info"]
        got = list(meta.get("spec_correct_drafts_histogram") or [])
        got += [0] * (MAX_DEPTH + 1 - len(got))
        assert (got, meta["spec_verify_ct"]) == (histogram(rounds), len(rounds)), (
            f"prompt {i}: the engine's per-request accept histogram / rounds {got} / {meta['spec_verify_ct']} "
            f"differ from the host replay of the oracle's plan {histogram(rounds)} / {len(rounds)}. "
            "If test_oracle_active_and_accept_lengths_cover_every_depth passed, the worker likely sees a "
            "different root position than replay_rounds assumes (round k's root = output token i_k at "
            "position prompt_len + i_k), or a planned path fell out of the tree")
        for d, n in branch_counts(rounds).items():
            planned_total[d] += n
    print(f"rounds that accepted a non-top-1 sibling, by depth 1..{MAX_DEPTH}: {planned_total}")
    assert all(n > 0 for n in planned_total.values()), planned_total
