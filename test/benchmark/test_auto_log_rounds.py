"""``benchmark/auto_log_rounds.py``: budget auto's single-round decode-log lines -> buckets in order and periods."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmark"))
import auto_log_rounds  # noqa: E402

_FMT = ("[2026-12-04 12:33:15] Decode batch, #running-req: {bs}, #token: 209, token usage: 0.01, accept len: {acc}, "
        "accept rate: 0.00 (of depth 15), accept len hist [1..16]: 1 0, auto budget: mean {b}.0, rounds by budget "
        "{b}:{n}, accepted drafts predicted 0.00 observed 0.00, cuda graph: True, gen throughput (token/s): {tput}, "
        "#queue-req: 0")


def _log():
    lines = ["[2026-12-04 12:33:14] Prefill batch, #new-seq: 1, #new-token: 128",
             _FMT.format(bs=2, acc="1.00", b=31, n=1, tput="0.00")]  # the first line: no period
    for tput in (250.0, 250.0, 200.0, 250.0):  # 8 ms rounds, one of 10 ms
        lines.append(_FMT.format(bs=2, acc="1.00", b=31, n=1, tput=tput))
    lines.append(_FMT.format(bs=2, acc="2.00", b=63, n=1, tput="400.00"))  # 2 x 2 tokens in 10 ms
    lines.append(_FMT.format(bs=4, acc="1.00", b=15, n=40, tput="500.00"))  # a 40-round interval: skipped
    lines.append(_FMT.format(bs=1, acc="1.00", b=7, n=1, tput="125.00"))
    return lines


def test_rounds_and_summary():
    rows = auto_log_rounds.rounds(_log())
    assert [(bs, b) for bs, b, _, _ in rows] == [(2, 31)] * 4 + [(2, 63), (1, 7)]
    assert [round(ms, 3) for _, _, ms, _ in rows] == [8.0, 8.0, 10.0, 8.0, 10.0, 8.0]
    assert all(est is None for *_, est in rows)  # lines before session 27 carry no estimates
    s = auto_log_rounds.summarise(rows, {2})
    assert list(s) == [2] and s[2]["sequence"] == [31, 31, 31, 31, 63]
    b31 = s[2]["buckets"][31]
    assert b31["rounds"] == 4 and b31["median_ms"] == 8.0 and b31["max_ms"] == 10.0 and b31["mean_ms"] == 8.5
    assert b31["slow_share"] == 0.25 and b31["fast_share"] == 0.0 and b31["quantiles_over_median"]["1.0"] == 1.25
    assert set(auto_log_rounds.summarise(rows)) == {1, 2}


def test_main_writes_json(tmp_path, capsys):
    log = tmp_path / "engine.log"
    log.write_text("\n".join(_log()) + "\n")
    out = tmp_path / "rounds.json"
    assert auto_log_rounds.main([str(log), "--bs", "2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["logs"][str(log)]["2"]["buckets"]["63"]["median_ms"] == 10.0
    assert "bs 2: 5 rounds" in capsys.readouterr().out
    empty = tmp_path / "empty.log"
    empty.write_text("nothing\n")
    auto_log_rounds.main([str(empty)])
    assert "no single-round auto lines" in capsys.readouterr().out


def test_the_cost_models_estimates_beside_the_periods():
    costs = lambda bs, c31: f"ms/round at bs {bs} {{0: 5.20, 15: -, 31: {c31}, 63: 7.70}}, "  # noqa: E731
    lines = [_FMT.format(bs=2, acc="1.00", b=31, n=1, tput="250.00").replace("cuda graph", costs(2, x) + "cuda graph")
             for x in ("7.50", "7.10", "7.20")]
    lines.append(_FMT.format(bs=2, acc="1.00", b=31, n=1, tput="250.00").replace("cuda graph", costs(4, "9.9") + "cuda graph"))
    rows = auto_log_rounds.rounds(lines)
    assert rows[0][3] == {0: 5.2, 31: 7.5, 63: 7.7} and rows[3][3] is None  # another batch size's: left out
    b31 = auto_log_rounds.summarise(rows)[2]["buckets"][31]
    assert b31["estimate_ms"] == {"median": 7.2, "last": 7.2} and b31["median_ms"] == 8.0
