"""benchmark/shadow_compare.py against the fake SGLang servers of test_bench_serving.py: identical fakes pass,
a candidate that changes one token (or stops early) is reported at that position, only the two given servers
are contacted (a third fake, also set as the HTTP proxy, must see nothing), and the exit codes. ``--reference``:
a divergence at a near-tie of the reference passes (exit 0), one beyond ``--tie-eps`` does not, the reference is
asked about exactly the prompt + common prefix and both tokens, and what cannot be classified says why."""

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_bench_serving import ROOT, fakes, free_port_url  # noqa: E402,F401 (fakes: the fixture)

sys.path.insert(0, os.path.join(ROOT, "benchmark"))
import shadow_compare as sc  # noqa: E402
from bench_e2e import PROMPTS  # noqa: E402

SCRIPT = os.path.join(ROOT, "benchmark", "shadow_compare.py")


def _run(base, cand, *extra):
    return sc.main(["--baseline", base.url, "--candidate", cand.url, "--max-new-tokens", "12", *extra])


def test_identical_servers_pass_and_nothing_else_is_contacted(fakes, tmp_path, capsys, monkeypatch):
    bystander = fakes()
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy"):
        monkeypatch.setenv(var, bystander.url)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    # 20 ms / 10 ms rounds (TPOT 20 / 5 ms, a request 230 / 70 ms): at 4 / 2 ms rounds the ~50 / 20 ms requests were
    # dominated by thread and connection overhead on a loaded 2-core CI machine and the throughput ratio fell to 0.94
    base, cand = fakes(round_s=0.02), fakes(round_s=0.01, per_round=2)
    out = tmp_path / "shadow.json"
    assert _run(base, cand, "--concurrency", "4", "--out", str(out)) == 0
    stdout = capsys.readouterr().out
    assert stdout.strip().splitlines()[-1] == f"VERDICT: IDENTICAL: {len(PROMPTS)}/{len(PROMPTS)} requests, " \
                                              f"{12 * len(PROMPTS)} output tokens"
    for f in (base, cand):
        assert dict(f.counts) == {("GET", "/health"): 1, ("POST", "/generate"): len(PROMPTS)}
    assert sum(bystander.counts.values()) == 0
    rep = json.loads(out.read_text())
    assert rep["exit_code"] == 0 and rep["divergences"] == [] and rep["compared_by_text"] == 0
    assert rep["summary"]["candidate"]["mean_accept_length"] is not None
    assert 0.1 < rep["ratios"]["tpot_p50"] < 0.5 and rep["ratios"]["output_tok_s"] > 1.5


def test_one_changed_token_is_reported_at_its_position(fakes, tmp_path, capsys):
    base = fakes()
    cand = fakes(mutate={PROMPTS[3]: (7, 4242)})
    out = tmp_path / "shadow.json"
    assert _run(base, cand, "--num-requests", "6", "--concurrency", "2", "--context", "2", "--out", str(out)) == 1
    stdout = capsys.readouterr().out
    assert "request 3 (prompt 3): first difference at output token 7 (lengths 12 / 12)" in stdout
    ids = base.tokens({"text": PROMPTS[3]}, 12)
    assert f"baseline  [5:]: {ids[5]} {ids[6]} [{ids[7]}] {ids[8]} {ids[9]}" in stdout
    assert f"candidate [5:]: {ids[5]} {ids[6]} [4242] {ids[8]} {ids[9]}" in stdout
    assert stdout.strip().splitlines()[-1].startswith("VERDICT: DIVERGED: 1/6 requests differ (first: request 3 at "
                                                      "output position 7)")
    (d,) = json.loads(out.read_text())["divergences"]
    assert (d["request"], d["position"], d["compared"]) == (3, 7, "output_ids")
    assert d["candidate_around"] == [ids[5], ids[6], 4242, ids[8], ids[9]] and d["around_start"] == 5


def test_early_stop_and_text_fallback(fakes, capsys):
    base, cand = fakes(), fakes(stop_after={PROMPTS[1]: 5})
    assert _run(base, cand, "--num-requests", "3") == 1
    stdout = capsys.readouterr().out
    assert "request 1 (prompt 1): first difference at output token 5 (lengths 12 / 5)" in stdout and "[end]" in stdout
    base, cand = fakes(output_ids=False), fakes(output_ids=False, mutate={PROMPTS[0]: (2, 999)})
    assert _run(base, cand, "--num-requests", "2") == 1
    stdout = capsys.readouterr().out
    assert "request 0 (prompt 0): first difference at output character" in stdout
    assert "note: 2 request(s) compared by text" in stdout


def test_prompts_file_and_repeated_requests(fakes, tmp_path, capsys):
    p = tmp_path / "p.jsonl"
    p.write_text('{"input_ids": [5, 6, 7]}\n{"prompt": "hello"}\n')
    base, cand = fakes(), fakes(mutate={(5, 6, 7): (0, 1)})
    assert _run(base, cand, "--prompts", str(p), "--num-requests", "5") == 1
    stdout = capsys.readouterr().out
    # requests 0, 2, 4 use the first prompt
    assert "DIVERGED: 3/5 requests differ (first: request 0 at output position 0)" in stdout
    assert "request 4 (prompt 0)" in stdout


def test_failed_request_is_incomplete(fakes, capsys):
    base, cand = fakes(), fakes(fail_every=2)
    assert _run(base, cand, "--num-requests", "4") == 2
    stdout = capsys.readouterr().out
    assert "request 1 failed: baseline None, candidate HTTP 500" in stdout
    assert "VERDICT: INCOMPLETE: 2/4 requests failed; the other 2 identical" in stdout


def test_unreachable_candidate_exits_2_before_any_request(fakes, capsys):
    base, dead = fakes(), free_port_url()
    assert sc.main(["--baseline", base.url, "--candidate", dead]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{dead}/health unreachable" in err
    assert base.counts["POST", "/generate"] == 0


@pytest.mark.parametrize("argv, message", [
    (["--baseline", "http://x:1"], "the following arguments are required: --candidate"),
    (["--baseline", "x:1", "--candidate", "http://y:1"], "URL must look like http://HOST[:PORT]"),
    (["--baseline", "http://x:1", "--candidate", "http://y:1", "--concurrency", "0"], "--concurrency 0"),
])
def test_bad_arguments(argv, message):
    proc = subprocess.run([sys.executable, SCRIPT, *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr


def _tie(near):
    """A reference whose greedy token is the first asked about (-0.70); the second at -0.75 when both are in
    ``near`` (a near-tie), else at -2.70."""
    def logprobs(ids, tokens):
        first, second = tokens
        return first, -0.70, {first: -0.70, second: -0.75 if {first, second} <= near else -2.70}
    return logprobs


def test_reference_near_tie_passes_and_is_asked_about_prompt_and_prefix(fakes, tmp_path, capsys):
    base, cand = fakes(), fakes(mutate={PROMPTS[3]: (7, 4242)})
    ids = base.tokens({"text": PROMPTS[3]}, 12)
    ref = fakes(logprobs=_tie({ids[7], 4242}))
    out = tmp_path / "shadow.json"
    assert _run(base, cand, "--num-requests", "6", "--reference", ref.url, "--out", str(out)) == 0
    stdout = capsys.readouterr().out
    assert stdout.strip().splitlines()[-1] == ("VERDICT: IDENTICAL UP TO NEAR-TIES: 1/6 requests differ, each at a "
                                               "near-tie of the reference (log-prob gap <= 0.2, largest 0.05)")
    assert f"reference: log-prob baseline -0.7 / candidate -0.75 (gap 0.05: near-tie); its own greedy token {ids[7]}" \
        in stdout
    # the text prompt's ids from the reference's own tokenization, then prompt + common prefix, both tokens
    tok, ask = ref.logprob_requests
    assert tok["text"] == PROMPTS[3] and tok["logprob_start_len"] == 0 and not tok["stream"]
    assert ask["input_ids"] == [ord(ch) for ch in PROMPTS[3]] + ids[:7] and ask["token_ids_logprob"] == [ids[7], 4242]
    assert ask["sampling_params"] == {"max_new_tokens": 1, "temperature": 0.0}
    assert ref.counts["POST", "/generate"] == 2  # nothing but the one divergence
    rep = json.loads(out.read_text())
    assert rep["exit_code"] == 0 and rep["settings"]["reference"] == ref.url and rep["settings"]["tie_eps"] == 0.2
    assert rep["divergences"][0]["reference"] == {
        "baseline_token": ids[7], "candidate_token": 4242, "baseline_logprob": -0.7, "candidate_logprob": -0.75,
        "gap": 0.05, "near_tie": True, "reference_token": ids[7], "reference_logprob": -0.7}


def test_reference_gap_beyond_eps_fails(fakes, tmp_path, capsys):
    p = tmp_path / "p.jsonl"
    p.write_text('{"input_ids": [5, 6, 7]}\n{"input_ids": [8, 9]}\n')
    base, cand = fakes(), fakes(mutate={(5, 6, 7): (2, 77), (8, 9): (4, 78)})
    b0, b1 = base.tokens({"input_ids": [5, 6, 7]}, 12), base.tokens({"input_ids": [8, 9]}, 12)
    ref = fakes(logprobs=_tie({b1[4], 78}))  # prompt 1's a near-tie, prompt 0's is not
    assert _run(base, cand, "--prompts", str(p), "--reference", ref.url) == 1
    stdout = capsys.readouterr().out
    assert "(gap 2.0: NOT a near-tie)" in stdout and "(gap 0.05: near-tie)" in stdout
    assert stdout.strip().splitlines()[-1] == ("VERDICT: DIVERGED: 2/2 requests differ (first: request 0 at output "
                                               "position 2); reference: 1 near-ties, 1 beyond --tie-eps 0.2, 0 not "
                                               "classified")
    # input_ids prompts need no tokenization request
    assert [r["input_ids"] for r in ref.logprob_requests] == [[5, 6, 7] + b0[:2], [8, 9] + b1[:4]]
    # a wider --tie-eps takes both
    assert _run(base, cand, "--prompts", str(p), "--reference", ref.url, "--tie-eps", "2.5") == 0
    # close to each other is not enough: both must be close to the reference's own best token
    third = fakes(logprobs=lambda ids, toks: (999, -0.01, {toks[0]: -3.00, toks[1]: -3.02}))
    capsys.readouterr()
    assert _run(base, cand, "--prompts", str(p), "--reference", third.url) == 1
    assert "(gap 3.01: NOT a near-tie); its own greedy token 999" in capsys.readouterr().out


def test_reference_cannot_classify_an_ended_output_or_a_refusal(fakes, capsys):
    base, cand = fakes(), fakes(stop_after={PROMPTS[1]: 5})
    ref = fakes(logprobs=_tie(set()))
    assert _run(base, cand, "--num-requests", "3", "--reference", ref.url) == 1
    stdout = capsys.readouterr().out
    assert "reference: not classified (one output ended at this position)" in stdout
    assert stdout.strip().endswith("reference: 0 near-ties, 0 beyond --tie-eps 0.2, 1 not classified")
    assert ref.counts["POST", "/generate"] == 0
    base, cand, spec = fakes(), fakes(mutate={PROMPTS[0]: (3, 5)}), fakes(refuse_logprob=True)
    assert _run(base, cand, "--num-requests", "1", "--reference", spec.url) == 1
    stdout = capsys.readouterr().out
    assert f"reference: not classified (reference {spec.url}: ValueError: HTTP 400: " in stdout
    assert "does not support return_logprob" in stdout


def test_reference_arguments(fakes, capsys):
    base, cand = fakes(), fakes()
    assert _run(base, cand, "--reference", free_port_url()) == 2
    assert "reference" in capsys.readouterr().err and base.counts["POST", "/generate"] == 0
    assert _run(base, cand, "--reference", base.url, "--tie-eps", "-1") == 2
    assert capsys.readouterr().err.strip() == "shadow_compare: error: --tie-eps -1.0: must be >= 0"


def test_first_difference():
    assert sc.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert sc.first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert sc.first_difference([1, 2], [1, 2, 3]) == 2 and sc.first_difference("abc", "abd") == 2
