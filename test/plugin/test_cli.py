"""``python -m sglang_ddtree``: the subcommands users type (the demo is the CPU main job)."""

import subprocess
import sys


def _cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "sglang_ddtree", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_demo_runs_on_cpu_and_checks_losslessness():
    proc = _cli("demo", "--num-prompts", "2", "--max-new-tokens", "24")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "== target greedy output, token for token" in proc.stdout
    assert proc.stdout.rstrip().endswith("OK: DDTree output equals the target's greedy output for every prompt")


def test_unknown_subcommand_is_a_usage_error():
    proc = _cli("serve")
    assert proc.returncode == 2
    assert "invalid choice: 'serve'" in proc.stderr
