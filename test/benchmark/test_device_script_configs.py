"""The device scripts name parity configs (``sharp:<name>`` / ``bias:<name>`` for ``scripts/device/ddtree_parity.py``)
and benchmark configs (``plain+fa3+loginfo``, ``ddtree:auto:8+fa3+noadmit``, ...) as literal text; a typo there is
found only on the GPU, at the cost of a device call. Every literal name must exist here."""

import glob
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = sorted(glob.glob(os.path.join(ROOT, "scripts", "device", "*.sh")))


def _texts():
    return {os.path.basename(p): open(p).read() for p in SCRIPTS}


def test_every_parity_config_the_device_scripts_name_exists():
    sys.path.insert(0, os.path.join(ROOT, "scripts", "device"))
    import ddtree_parity

    named = set()
    for script, text in _texts().items():
        # "sharp:" / "bias:" followed by a literal name; a name built from shell variables is skipped (the part
        # before the first "$" is not a whole name)
        for m in re.finditer(r"\b(sharp|bias):([A-Za-z0-9_]+)(\$?)", text):
            if not m.group(3):
                named.add((script, m.group(2)))
    assert len(named) > 20  # the pattern still finds the scripts' configs
    missing = sorted((s, n) for s, n in named if n not in ddtree_parity.CONFIGS)
    assert missing == [], f"parity configs named in scripts/device but not in ddtree_parity.CONFIGS: {missing}"


def test_every_benchmark_config_the_device_scripts_name_parses():
    sys.path.insert(0, os.path.join(ROOT, "benchmark"))
    from bench_e2e import engine_kwargs

    named = set()
    for script, text in _texts().items():
        for m in re.finditer(r"(?<![\w$:/.])((?:plain|dflash|ddtree:(?:auto|\d+):\d+)(?:\+[A-Za-z0-9_]+)+)(\$?)",
                             text):
            if not m.group(2):
                named.add((script, m.group(1)))
    assert len(named) > 20
    for script, spec in sorted(named):
        try:
            engine_kwargs(spec, "draft", "triton")
        except ValueError as e:
            pytest.fail(f"{script}: {spec}: {e}")


def test_the_admission_window_modifiers_set_its_variable():
    """``+noadmit`` turns the default window off (the A/B's control since session 49), ``+admitwaitN`` names one."""
    sys.path.insert(0, os.path.join(ROOT, "benchmark"))
    from bench_e2e import _MODIFIERS, ENV_MODIFIERS

    assert ENV_MODIFIERS["noadmit"] == {"SGLANG_DDTREE_ADMIT_WAIT": "0"}
    assert {ENV_MODIFIERS[f"admitwait{n}"]["SGLANG_DDTREE_ADMIT_WAIT"] for n in (4, 8, 16)} == {"4", "8", "16"}
    assert "prefull" not in _MODIFIERS  # refused by validation (session 49): no config may name it


@pytest.mark.parametrize("env, message", [
    ({"WINDOW_AB": "0", "WINDOW_PARITY": "0"}, "leave nothing to run"),
    ({"WINDOW_AB": "yes"}, "take 0 or 1 (got 'yes' / '')"),
    ({"WINDOW_PARITY": "2"}, "take 0 or 1 (got '' / '2')"),
])
def test_the_window_mode_refuses_its_switches_before_it_runs_anything(tmp_path, env, message):
    """``issue13.sh window``'s two halves (the A/B, the parity) are switched by ``WINDOW_AB`` / ``WINDOW_PARITY``
    (session 50: ``WINDOW_AB=0`` runs the parity alone in a short call); a bad value stops it with one line, before
    an engine starts or anything is written under ``$OUT`` but the folder."""
    import subprocess

    out = tmp_path / "out"
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("WINDOW_")}
    run_env.update(env, OUT=str(out))
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "device", "issue13.sh"), "window"], env=run_env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert message in r.stderr and r.stderr.count("\n") == 1
    assert list(out.iterdir()) == []
