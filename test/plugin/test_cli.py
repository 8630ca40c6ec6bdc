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


def test_a_bad_demo_argument_is_one_error_line_before_any_model_loads():
    proc = _cli("demo", "--num-prompts", "0", timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines()[-1] == (
        "python -m sglang_ddtree demo: error: argument --num-prompts: must be an integer >= 1, got '0'")


def test_help_is_plain_text():  # descriptions come from docstrings written in RST: no ``literal`` markup
    for args in ((), ("doctor",), ("demo",)):
        proc = _cli(*args, "--help", timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "usage: python -m sglang_ddtree" in proc.stdout and "`" not in proc.stdout, proc.stdout
