"""GPU: DDTREE's accept-length observability and per-request refusals on a live engine / server.

The packaged tiny trained pair (``sglang_ddtree.fixtures.tiny_pair_path()``: block size 16, so at budget 64
the tree is at most 15 deep and accept lengths are 1..16), triton, the settings of
``benchmark/bench_e2e.py``'s COMMON. Each run is a subprocess (a dying scheduler takes its parent with it):
  - an ``sglang.Engine`` (metrics on, decode log every 4 rounds): per-request meta info, the decode log
    line, refusals of unsupported features, and that the engine still serves afterwards;
  - ``python -m sglang.launch_server --enable-metrics``: ``/metrics`` carries the depth accept rate and
    the accept-length counter.
"""

import json
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _http_helpers import free_port as _free_port, http as _http, wait_healthy  # noqa: E402

pytestmark = pytest.mark.gpu

BUDGET, TOPK = 64, 8
PROMPTS = ["def fibonacci(n):\n    ", "class LRUCache:\n    def __init__(self, capacity):\n        ",
           "def is_prime(n):\n    if n < 2:\n        return False\n    ", "def merge(a, b):\n    result = []\n    "]
FLAGS = dict(dtype="bfloat16", mem_fraction_static=0.45, context_length=2048, max_total_tokens=65536,
             sampling_backend="pytorch", cuda_graph_max_bs_decode=16, attention_backend="triton",
             speculative_algorithm="DDTREE", speculative_ddtree_budget=BUDGET, speculative_ddtree_topk=TOPK,
             enable_metrics=True, decode_log_interval=4, log_level="info")
# accept len: X, accept rate: Y (of depth D), accept len hist [1..W]: c1 ... cW,
DECODE_LINE = re.compile(r"accept len: ([0-9.]+), accept rate: ([0-9.]+) \(of depth (\d+)\), "
                         r"accept len hist \[1\.\.(\d+)\]: ([0-9 ]+),")


def _pair():
    from sglang_ddtree.fixtures import tiny_pair_path

    return tiny_pair_path()


def _max_depth(pair) -> int:
    """D of the DDTREE engine under test: ``DDTreeConfig.max_depth`` for the drafter's block size."""
    from sglang_ddtree.config import DDTreeConfig

    with open(os.path.join(pair.draft, "config.json")) as f:
        block_size = int(json.load(f)["block_size"])
    return DDTreeConfig(budget=BUDGET, topk=TOPK, block_size=block_size).max_depth


ENGINE_SCRIPT = r"""
import json, sys
import sglang

def main():
    flags = json.loads(sys.argv[1])
    engine = sglang.Engine(**flags)
    out = {"requests": [], "refusals": {}}
    try:
        greedy = dict(temperature=0.0, max_new_tokens=64, ignore_eos=True)
        for r in engine.generate(prompt=json.loads(sys.argv[2]), sampling_params=greedy):
            out["requests"].append(r["meta_info"])
        cases = {
            "return_logprob": dict(return_logprob=True),
            "json_schema": dict(sampling_params=dict(greedy, json_schema='{"type": "object"}')),
            "min_p": dict(sampling_params=dict(greedy, temperature=0.7, min_p=0.05)),
        }
        for name, kw in cases.items():
            kw.setdefault("sampling_params", greedy)
            try:
                r = engine.generate(prompt="def f(x):\n    ", **kw)
                out["refusals"][name] = json.dumps(r["meta_info"].get("finish_reason"))
            except Exception as e:  # SGLang raises a BAD_REQUEST abort as ValueError
                out["refusals"][name] = f"{type(e).__name__}: {e}"
        r = engine.generate(prompt="def g(y):\n    ", sampling_params=greedy)
        out["after_refusals"] = r["meta_info"]
    finally:
        engine.shutdown()
    print("RESULT " + json.dumps(out), flush=True)

if __name__ == "__main__":
    main()
"""


def test_engine_meta_info_log_and_refusals(tmp_path):
    pair = _pair()
    script = tmp_path / "run_engine.py"
    script.write_text(ENGINE_SCRIPT)
    flags = dict(FLAGS, model_path=pair.target, speculative_draft_model_path=pair.draft)
    proc = subprocess.run([sys.executable, str(script), json.dumps(flags), json.dumps(PROMPTS)],
                          capture_output=True, text=True, timeout=900)
    (tmp_path / "engine.log").write_text(proc.stdout + proc.stderr)
    result_lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and result_lines, proc.stderr[-4000:]
    out = json.loads(result_lines[-1][len("RESULT "):])
    depth = _max_depth(pair)

    total_ct = total_correct = 0
    for meta in out["requests"] + [out["after_refusals"]]:
        ct, correct = meta["spec_verify_ct"], meta["spec_num_correct_drafts"]
        hist = meta["spec_correct_drafts_histogram"]
        assert ct > 0 and sum(hist) == ct and len(hist) <= depth + 1, meta
        assert correct == sum(i * n for i, n in enumerate(hist)), meta
        assert meta["spec_accept_length"] == pytest.approx(meta["completion_tokens"] / ct)
        assert meta["spec_accept_rate"] == pytest.approx(correct / (ct * depth))  # depth, not budget
        total_ct, total_correct = total_ct + ct, total_correct + correct
    assert 1 + total_correct / total_ct > 1.5  # the pair accepts ~2.9 tokens/round at budget 64

    for name, message in out["refusals"].items():
        assert "DDTREE speculative decoding does not support" in message, (name, message)
    assert "return_logprob" in out["refusals"]["return_logprob"]
    assert "grammar-constrained" in out["refusals"]["json_schema"]
    assert "min_p" in out["refusals"]["min_p"]

    lines = [m for m in map(DECODE_LINE.search, (proc.stdout + proc.stderr).splitlines()) if m]
    assert lines, "no DDTREE decode-log line (accept rate of depth / accept len hist)"
    for m in lines:
        mean, rate, d, width, counts = m.groups()
        counts = list(map(int, counts.split()))
        assert int(d) == depth and int(width) == depth + 1 == len(counts) and sum(counts) > 0
        assert float(mean) == pytest.approx(sum((i + 1) * c for i, c in enumerate(counts)) / sum(counts),
                                            abs=0.006)  # both from the same interval
        assert float(rate) == pytest.approx((float(mean) - 1) / depth, abs=0.006)


def test_server_metrics_endpoint(tmp_path):
    pair = _pair()
    port = _free_port()
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", pair.target,
           "--speculative-draft-model-path", pair.draft, "--host", "127.0.0.1", "--port", str(port)]
    for key, value in FLAGS.items():
        flag = "--" + key.replace("_", "-")
        cmd += [flag] if value is True else [flag, str(value)]
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, server, tmp_path / "server.log", 600)
        greedy = dict(temperature=0.0, max_new_tokens=64, ignore_eos=True)
        for prompt in PROMPTS:
            status, body = _http(base + "/generate", dict(text=prompt, sampling_params=greedy), timeout=300)
            assert status == 200, body
            assert json.loads(body)["meta_info"]["spec_verify_ct"] > 0
        status, body = _http(base + "/generate", dict(text=PROMPTS[0], sampling_params=greedy, return_logprob=True))
        assert "DDTREE speculative decoding does not support return_logprob" in body, (status, body)

        status, text = _http(base + "/metrics")
        assert status == 200
        depth = _max_depth(pair)
        counts = {int(m.group(1)): float(m.group(2)) for m in re.finditer(
            r'^sglang:ddtree_accept_length_total\{[^}]*accept_length="(\d+)"[^}]*\} ([0-9.e+]+)$', text, re.M)}
        assert counts and sum(counts.values()) > 0 and max(counts) <= depth + 1, text[-3000:]
        def gauge(name):
            values = re.findall(rf"^sglang:{name}\{{[^}}]*\}} ([0-9.e+-]+)$", text, re.M)
            assert len(values) == 1, (name, values)
            return float(values[0])

        # Both gauges come from the same decode-log interval: rate = (length - 1) / depth, not / budget.
        length, rate = gauge("spec_accept_length"), gauge("spec_accept_rate")
        assert length > 1.0 and rate == pytest.approx((length - 1) / depth)
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
