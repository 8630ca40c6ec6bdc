"""GPU: at T > 0, DDTREE's tokens follow the same distribution as plain sampling (target-only tree sampling).

Runs ``scripts/device/sampling_dist.py`` in a subprocess: the packaged trained pair (vocab 2048, bf16,
triton, or ``DDTREE_TEST_BACKEND``; tp 1, or ``DDTREE_TEST_TP``: see ``_gpu_backend.py``), 2,000 requests per prompt and setting, the first 3 generated tokens of each, with the plain engine
and with DDTREE (budget 16, top-K 4): temperature 0.7 alone and with top_k 20 on prompts 0-2, top_p 0.7 on
prompt 3, top_p 0.85 + top_k 2 on prompt 4 (both filters cut there).
The first token comes from the prefill sampler in both engines; the second is DDTREE's first tree
round (accepted node or bonus token), so it and the (first, second) pair are the real test.

Why the top-p settings have their own prompts: whether the token at a top-p (or top-k) boundary is kept is
a discrete decision, and the verify forward (tree of 17 tokens, custom mask) and plain decoding (one token)
round bf16 logits differently. On the H200, a prompt whose float32 boundary margins were >= 0.011 of
cumulative mass failed the comparison at top_p 0.9 (p < 1e-4) - for top_p alone as well as with top_k -
while its temperature-only and top_k settings passed. Prompts 3 and 4 keep every boundary their first two
tokens meet >= 0.086 away (sampling_dist.py). The filter logic itself is tested on exact logits, where no
rounding differs, in ``test_sampling_kernel_gpu.py`` (incl. the case where the order of top-k and top-p
matters).

Two-sample chi-square (``_sampling_stats.chi2_two_sample``, categories expected < 5 times pooled) of
DDTREE vs plain for the first token, the second token and the pair, per prompt and setting: p > P_MIN =
0.001. Under a correct sampler one comparison fails with probability 0.001, the 24 together ~2.4%; with
2,000 draws per side, moving 5% of the mass from the top token (~0.3) to one of ~0.07 gives p < 1e-4
(``test_sampling_stats.py``); shifts between two large tokens need more (chi-square ~ n delta^2 / p).
Sanity against the exact float32 distribution of the reference target (first token: SGLang's plain
filter; second token: the marginal over first tokens): goodness of fit p > P_EXACT = 1e-6, looser because
the engines compute bf16 logits (a few hundredths of a logit move probabilities by ~1-5%).
Needs the wheel installed (the plugin's entry point) and SGLang's GPU stack.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _sampling_stats as st  # noqa: E402
from _gpu_backend import test_backend, test_tp_size, tp_skip_reason  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(tp_skip_reason() is not None, reason=str(tp_skip_reason()))]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
P_MIN = 1e-3
P_EXACT = 1e-6
SETTINGS = {"t0.7": dict(temperature=0.7), "t0.7_k20": dict(temperature=0.7, top_k=20),
            "t0.7_p0.7": dict(temperature=0.7, top_p=0.7),
            "t0.7_p0.85_k2": dict(temperature=0.7, top_p=0.85, top_k=2)}
SETTING_PROMPTS = {"t0.7": [0, 1, 2], "t0.7_k20": [0, 1, 2], "t0.7_p0.7": [3], "t0.7_p0.85_k2": [4]}
CASES = [(s, p) for s, ps in SETTING_PROMPTS.items() for p in ps]


DDTREE_SPEC = "ddtree:auto:4" if os.environ.get("DDTREE_TEST_SAMPLING_AUTO", "") == "1" else "ddtree:16:4"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from sglang_ddtree.fixtures import tiny_pair_path

    pair = tiny_pair_path()
    out = tmp_path_factory.mktemp("sampling") / "sampling.json"
    # DDTREE_TEST_SAMPLING_AUTO=1: the DDTREE engine runs --speculative-ddtree-budget auto with the test plugin's
    # fixed bucket cycle (a new width every round, width 0 included)
    auto = os.environ.get("DDTREE_TEST_SAMPLING_AUTO", "") == "1"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "device", "sampling_dist.py"),
                           "--target", pair.target, "--draft", pair.draft, "--configs", f"plain,{DDTREE_SPEC}",
                           "--num-samples", "2000", "--tokens", "3", "--attention-backend", test_backend(),
                           "--tp-size", str(test_tp_size()), "--out", str(out)] + (["--cycle-budgets"] if auto else []),
                          capture_output=True, text=True, timeout=900)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    keep = os.environ.get("SGLANG_DDTREE_KEEP_REPORTS")
    if keep:
        os.makedirs(keep, exist_ok=True)
        shutil.copy(out, keep)
    with open(out) as f:
        rep = json.load(f)
    rep["_log"] = proc.stdout[-6000:] + proc.stderr[-6000:]
    rep["by_config"] = {r["config"]: r for r in rep["results"]}
    return rep


@pytest.fixture(scope="module")
def target(report):
    import torch

    from sglang_ddtree.reference.qwen3 import Qwen3ForCausalLM

    return Qwen3ForCausalLM.from_pretrained(report["settings"]["target"], dtype=torch.float32).eval()


def _draws(report, config, setting, prompt):
    assert config in report["by_config"], (
        f"{config} left no record: its engine died (a dying scheduler takes sampling_dist.py with it); "
        f"sampling_dist.py output:\n{report.get('_log', '')[-4000:]}")
    rec = report["by_config"][config]
    assert "error" not in rec, (config, rec.get("traceback"))
    draws = rec["samples"][setting][SETTING_PROMPTS[setting].index(prompt)]
    assert len(draws) == report["settings"]["num_samples"] and all(len(d) == 3 for d in draws)
    return draws


def test_both_configs_ran(report):
    assert report["settings"]["sampling"] == SETTINGS and report["settings"]["setting_prompts"] == SETTING_PROMPTS
    assert {"plain", DDTREE_SPEC} <= set(report["by_config"]), report["_log"][-4000:]
    for rec in report["results"]:
        assert "error" not in rec, (rec["config"], rec.get("traceback"))
        assert set(rec["samples"]) == set(SETTINGS)
    acc = report["by_config"][DDTREE_SPEC]["mean_accept_length"]
    print(f"DDTREE mean accept length at T > 0: {acc}")
    assert all(a is not None and a > 1.0 for a in acc.values()), acc  # the tree walk accepted nodes


POSITIONS = {"first": lambda d: d[0], "second": lambda d: d[1], "pair": lambda d: (d[0], d[1])}


@pytest.mark.parametrize("setting,prompt", CASES)
@pytest.mark.parametrize("position", list(POSITIONS))
def test_ddtree_matches_plain(report, setting, prompt, position):
    if test_backend() == "fa3" and (setting, prompt) in PLAIN_FA3_OFF_TARGET and position != "second":
        # plain's first token is off the float32 target there (test_close_to_exact_target's strict xfail), so a
        # DDTREE that samples the target exactly differs from it: session 32 (H100, fa3, auto's bucket cycle) drew
        # 0.707 / 0.293 against float32's 0.7115 / 0.2885 (p 0.66) and plain's 0.6535 / 0.3465 (chi2 13.2, p 3e-4).
        # DDTREE's first token is held to the float32 target by test_close_to_exact_target instead.
        pytest.skip("plain fa3's first token is off the float32 target here (PLAIN_FA3_OFF_TARGET); "
                    "test_close_to_exact_target checks DDTREE's against float32")
    key = POSITIONS[position]
    plain = [key(d) for d in _draws(report, "plain", setting, prompt)]
    tree = [key(d) for d in _draws(report, DDTREE_SPEC, setting, prompt)]
    r = st.chi2_two_sample(plain, tree)
    print(f"{setting} prompt {prompt} {position}: chi2 {r.stat:.1f} df {r.df} p {r.p:.4f}")
    assert r.p > P_MIN, (setting, prompt, position, r)


# Upstream's own plain engine on fa3 (no speculation) misses the float32 target at one case, in two sessions
# (2026-12-01, -02, H200): prompt 3 at top_p 0.7 keeps two tokens and samples them 0.6535 / 0.3465 where float32 gives
# 0.7115 / 0.2885 (chi2 32.8, p 1e-8; a ~0.19 logit shift from its bf16 decode attention), while DDTREE on fa3 passes
# the same check and matches that plain engine (p 0.01). Expected to fail, strictly: a pass means fa3 changed.
PLAIN_FA3_OFF_TARGET = {("t0.7_p0.7", 3)}


@pytest.mark.parametrize("setting,prompt", CASES)
@pytest.mark.parametrize("config", ["plain", DDTREE_SPEC])
def test_close_to_exact_target(request, report, target, setting, prompt, config):
    if config == "plain" and test_backend() == "fa3" and (setting, prompt) in PLAIN_FA3_OFF_TARGET:
        request.applymarker(pytest.mark.xfail(strict=True, reason="upstream's plain fa3 decode, see PLAIN_FA3_OFF_TARGET"))
    s = SETTINGS[setting]
    ids = report["prompt_ids"][prompt]
    filt = lambda lg: st.plain_probs(lg, s["temperature"], s.get("top_p", 1.0), s.get("top_k", -1))  # noqa: E731
    first = filt(st.exact_next(target, ids))
    second = st.exact_second(target, ids, first, filt)
    draws = _draws(report, config, setting, prompt)
    for name, probs, sample in (("first", first, [d[0] for d in draws]), ("second", second, [d[1] for d in draws])):
        r = st.chi2_goodness_of_fit(sample, st.as_dict(probs))
        print(f"{config} {setting} prompt {prompt} {name} vs float32 exact: chi2 {r.stat:.1f} df {r.df} p {r.p:.2e}")
        assert r.p > P_EXACT, (config, setting, prompt, name, r, _largest_gaps(sample, st.as_dict(probs)))


def _largest_gaps(sample, probs: dict, k: int = 6) -> list:
    """The ``k`` outcomes whose observed frequency is farthest from ``probs``: (token, observed, expected), so a
    failure says which token moved (e.g. one at a top-p boundary, kept by one code path and cut by the other)."""
    from collections import Counter

    counts, n = Counter(sample), len(sample)
    keys = set(counts) | {t for t, p in probs.items() if p > 0}
    gaps = sorted(keys, key=lambda t: -abs(counts[t] / n - probs.get(t, 0.0)))[:k]
    return [(t, round(counts[t] / n, 4), round(probs.get(t, 0.0), 4)) for t in gaps]
