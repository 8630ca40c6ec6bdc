"""scripts/device/parallel.sh on the CPU: the per-command records and one tar of the logs come back also when
the device call is stopped (session 13 lost three commands' results to a call that ended before the summary)."""

import json
import os
import signal
import subprocess
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "device", "parallel.sh")


def _run(tmp_path, *cmds, stop_after=None, **env):
    """``stop_after``: a file under $OUT; once it exists the call is stopped as `timeout` stops it (TERM)."""
    out = tmp_path / "out"
    e = dict(os.environ, OUT=str(out), **{"STAGGER_S": "0", **env})
    p = subprocess.Popen(["bash", SCRIPT, *cmds], env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    if stop_after is not None:
        deadline = time.time() + 60
        while not (out / stop_after).exists() and p.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the slow command is running too (it started with the quick one)
        p.send_signal(signal.SIGTERM)
    text, _ = p.communicate(timeout=120)
    summary = json.loads((out / "parallel.json").read_text())
    with tarfile.open(out / "logs.tar.gz") as t:
        names = t.getnames()
    return p.returncode, summary, names, text


def test_every_command_is_summarised(tmp_path):
    rc, summary, names, text = _run(tmp_path, "ok=echo PASSED t.py::a; echo '1 passed in 0.1s'", "bad=exit 3")
    assert rc == 0, text
    assert summary["commands"]["ok"] == {"rc": "0", "result": "1 passed in 0.1s", "failures": [], "passed": ["t.py::a"]}
    assert summary["commands"]["bad"]["rc"] == "3"
    assert "logs/ok.log" in names and "logs/bad.log" in names


def test_a_parity_run_is_summarised_per_config(tmp_path):
    """A ddtree_parity.py command (its results.jsonl under $CMD_OUT) gets each config's verdict in the summary:
    exact, diverged, an error, no reference, or skipped at its deadline (session 47: the pytest-line reading left
    those runs' summary empty)."""
    recs = [{"config": "sharp:plain_fa3", "self_parity": {"1": {"equal": 32, "total": 32}}},
            {"config": "sharp:dd_a", "parity": {"1": {"equal": 32, "total": 32}, "1c": {"equal": 32, "total": 32}}},
            {"config": "sharp:dd_b", "parity": {"4": {"equal": 47, "total": 48}}},
            {"config": "sharp:dd_c", "error": "RuntimeError: capture failed"},
            {"config": "sharp:dd_d", "parity": "no reference for ('sharp', 'fa3')"}]
    src = tmp_path / "results.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in recs) + "not json\n")
    cmd = f"parity=cp {src} $CMD_OUT/results.jsonl; echo '[parity] deadline reached, skipping sharp:dd_e'"
    rc, summary, names, text = _run(tmp_path, cmd)
    assert rc == 0, text
    assert summary["commands"]["parity"]["parity"] == {
        "sharp:plain_fa3": "exact 1:32/32", "sharp:dd_a": "exact 1:32/32 1c:32/32", "sharp:dd_b": "DIVERGED 4:47/48",
        "sharp:dd_c": "error: RuntimeError: capture failed", "sharp:dd_d": "no reference for ('sharp', 'fa3')",
        "sharp:dd_e": "skipped at the deadline"}
    assert "parity/results.jsonl" in names


def test_a_stopped_call_still_leaves_the_summary_and_the_logs(tmp_path):
    t0 = time.time()
    rc, summary, names, text = _run(tmp_path, "quick=echo '2 passed in 0.1s'", "slow=sleep 60", stop_after="logs/quick.rc")
    assert time.time() - t0 < 45  # the running command was stopped with the call (not its 60 s)
    assert rc == 143, text
    assert summary["commands"]["quick"]["result"] == "2 passed in 0.1s"
    # still running when the call was stopped: no exit code yet, or the TERM's (the stop races its subshell's record)
    assert summary["commands"]["slow"]["rc"] in (None, "143") and summary["commands"]["slow"]["result"] is None
    assert "logs/quick.log" in names and "logs/slow.log" in names


def test_every_command_ends_by_the_same_deadline(tmp_path):
    """CMD_TIMEOUT_S counts from the first command's start, so staggered starts do not push the last past it."""
    import re

    rc, summary, _, text = _run(tmp_path, "a=sleep 60", "b=sleep 60", CMD_TIMEOUT_S="16", STAGGER_S="3")
    assert rc == 0, text
    assert summary["commands"]["a"]["rc"] == summary["commands"]["b"]["rc"] == "124"
    ran = {m[0]: int(m[1]) for m in re.findall(r"\[parallel\] (\w) rc=124 (\d+)s", text)}
    assert 15 <= ran["a"] <= 17 and 12 <= ran["b"] <= 14, text  # b started 3 s later with 13 s left
