"""``benchmark/prefill_gaps.py``: per 40-round decode-log interval, its wall time, auto's rounds' own time from the
cost model's estimates, and the rest per prefill batch between the lines."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmark"))
import prefill_gaps  # noqa: E402

_DECODE = ("[2026-12-06 17:09:16] Decode batch, #running-req: {bs}, #token: 2871, token usage: 0.04, accept len: {acc}, "
           "accept rate: 0.14 (of depth 15), accept len hist [1..16]: 91 110, auto budget: mean 41.6, rounds by budget "
           "{mix}, accepted drafts predicted 2.21 observed 2.23, ms/round at bs {bs} {{0: 1.75, 15: {c15}, 63: 3.00, "
           "7: -}}, cuda graph: True, gen throughput (token/s): {tput}, #queue-req: 0")
_PREFILL = ("[2026-12-06 17:09:16] Prefill batch, #new-seq: {n}, #new-token: 15, #cached-token: 0, token usage: 0.00, "
            "#running-req: 15, #queue-req: 0, cuda graph: True, input throughput (token/s): 21.08")
_PLAIN = ("[2026-12-06 17:08:44] Decode batch, #running-req: {bs}, #token: 627, token usage: 0.01, cuda graph: True, "
          "gen throughput (token/s): {tput}, #queue-req: 0")


def _auto_log():
    # interval 1: 16 x 40 x 2.5 = 1600 tokens at 8000 tok/s = 200 ms; rounds 20 x 2 + 20 x 3 ms = 100 ms; 10 prefills
    # interval 2: 1600 tokens at 10000 tok/s = 160 ms; rounds 40 x 2.5 = 100 ms; 5 prefills (2 requests each)
    return (["server_args=DDTreeServerArgs(model_path='t', speculative_algorithm='DDTREE', x=1)",
             _DECODE.format(bs=16, acc="2.50", mix="15:40", c15="2.00", tput="0.00")]  # the first line: no interval
            + [_PREFILL.format(n=1)] * 8 + [_PREFILL.format(n=1).replace("cuda graph: True", "cuda graph: False")] * 2
            + [_DECODE.format(bs=16, acc="2.50", mix="15:20 63:20", c15="2.00", tput="8000.00")]
            + [_PREFILL.format(n=2)] * 5
            + [_DECODE.format(bs=16, acc="2.50", mix="15:40", c15="2.50", tput="10000.00")]
            + [_DECODE.format(bs=16, acc="2.50", mix="7:40", c15="2.50", tput="10000.00")])  # 7 unestimated


def test_intervals_read_wall_rounds_and_prefills():
    rows = prefill_gaps.intervals(_auto_log())
    assert [(r["prefills"], r["admitted"], r["eager"]) for r in rows] == [(10, 10, 2), (5, 10, 0), (0, 0, 0)]
    assert [round(r["wall_s"], 4) for r in rows] == [0.2, 0.16, 0.16]
    assert [r["rounds_s"] and round(r["rounds_s"], 4) for r in rows] == [0.1, 0.1, None]


def test_summary_rest_per_prefill_and_slope():
    s = prefill_gaps.summarise(prefill_gaps.intervals(_auto_log()), [(8, 16), (30, 48)], 0.4)
    assert list(s) == ["8-16"]  # no interval in the other band
    band = s["8-16"]
    assert band["intervals"] == 3 and band["throughput_median"] == 10000.0
    assert band["eager_mean"] == round(2 / 3, 2)  # prefill batches without the target's prefill graph
    assert band["rest_ms_mean"] == 80.0  # (100 + 60) / 2 ms over the two timed intervals
    assert band["rest_ms_per_prefill"] == round(160 / 15, 2)
    assert band["rest_ms_slope_per_prefill"] == 8.0  # (100 - 60) ms / (10 - 5) prefills
    assert prefill_gaps.summarise(prefill_gaps.intervals(_auto_log()), [(8, 16)], 0.18)["8-16"]["intervals"] == 2


def test_cli_on_a_plain_log(tmp_path, capsys):
    log = tmp_path / "engine_0.log"
    log.write_text("\n".join(["server_args=ServerArgs(speculative_algorithm=None, x=1)",
                              _PLAIN.format(bs=16, tput="10.0"), _PREFILL.format(n=16),
                              _PLAIN.format(bs=16, tput="16000.0")]) + "\n")
    out = tmp_path / "gaps.json"
    assert prefill_gaps.main([str(log), "--json", str(out)]) == 0
    report = json.loads(out.read_text())[str(log)]
    assert report["algorithm"] == "none"
    # the first line's interval (640 tokens at 10 tok/s = 64 s) is a pause: left out; the second is 40 ms
    assert report["bands"]["8-16"] == dict(intervals=1, throughput_median=16000.0, wall_ms_median=40.0,
                                           prefills_mean=1, admitted_mean=16, eager_mean=0)
    assert "running 8-16: 1 intervals, 16000.0 tok/s" in capsys.readouterr().out
