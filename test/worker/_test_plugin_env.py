"""The environment that loads the TEST-ONLY plugin ``ddtree_test_hooks`` (test/_test_plugin) in SGLang.

``plugin_env(...)`` returns the variables to pass to an engine process: ``PYTHONPATH`` with
test/_test_plugin first (SGLang's ``load_plugins`` then finds the ``ddtree_test`` entry point) and the
``DDTREE_TEST_*`` variables of the hooks asked for. Pass it to ``subprocess.run(env=...)``: a process
started with it has the folder on ``sys.path``, and so have the schedulers it spawns (multiprocessing's
spawn copies the parent's ``sys.path`` to the child and ignores a PYTHONPATH changed after start). A
process that starts engines itself must call ``add_plugin_path()`` (sys.path) and set the variables in
``os.environ`` before each Engine: ``scripts/device/ddtree_parity.py`` does.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PLUGIN_DIR = os.path.join(os.path.dirname(HERE), "_test_plugin")
if PLUGIN_DIR not in sys.path:  # the hooks' pure modules (draft_oracle, verify_check) for the tests
    sys.path.insert(0, PLUGIN_DIR)

from ddtree_test_hooks import env as hook_env  # noqa: E402

TEST_VARS = hook_env.ALL_VARS


def plugin_env(*, draft_oracle: str = "", reverse_ranks: bool = False, verify_dump: str = "",
               verify_dump_rounds: int = 0, corrupt_mask: str = "", cycle_budgets: bool = False,
               hybrid_fault: str = "", compile_log: str = "", pin_budget: int = -1,
               phase_times: str = "", sync_watch: str = "", floor_round: bool = False, phase_split: bool = False,
               base=None) -> dict:
    """Variables to ADD to ``base`` (default ``os.environ``) for an engine process with these hooks.
    Always sets every DDTREE_TEST_* variable (empty = off), so nothing leaks in from ``base``."""
    base = os.environ if base is None else base
    paths = [PLUGIN_DIR] + [p for p in base.get("PYTHONPATH", "").split(os.pathsep) if p and p != PLUGIN_DIR]
    out = {
        "PYTHONPATH": os.pathsep.join(paths),
        hook_env.DRAFT_ORACLE: str(draft_oracle or ""),
        hook_env.REVERSE_RANKS: "1" if reverse_ranks else "",
        hook_env.VERIFY_DUMP: str(verify_dump or ""),
        hook_env.VERIFY_DUMP_ROUNDS: str(verify_dump_rounds) if verify_dump_rounds else "",
        hook_env.CORRUPT_MASK: corrupt_mask or "",
        hook_env.CYCLE_BUDGETS: "1" if cycle_budgets else "",
        hook_env.HYBRID_FAULT: hybrid_fault or "",
        hook_env.COMPILE_LOG: str(compile_log or ""),
        hook_env.PIN_BUDGET: str(pin_budget) if pin_budget >= 0 else "",
        hook_env.PHASE_TIMES: str(phase_times or ""),
        hook_env.SYNC_WATCH: str(sync_watch or ""),
        hook_env.FLOOR_ROUND: "1" if floor_round else "",
        hook_env.PHASE_SPLIT: "1" if phase_split else "",
    }
    allowed = base.get("SGLANG_PLUGINS", "").strip()
    if allowed and "ddtree_test" not in [x.strip() for x in allowed.split(",")]:
        out["SGLANG_PLUGINS"] = allowed + ",ddtree_test"  # a plugin whitelist would skip the test plugin
    hook_env.HookEnv.from_env(dict(base, **out))  # fail here, not as a log line in the scheduler
    return out


def process_env(**hooks) -> dict:
    """A whole environment for ``subprocess.run(env=...)``: ``os.environ`` + ``plugin_env(**hooks)``."""
    return dict(os.environ, **plugin_env(**hooks))


def without_test_vars(environ=None) -> dict:
    """``environ`` (default ``os.environ``) minus every DDTREE_TEST_* variable: a reference engine's."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k not in TEST_VARS}


def add_plugin_path() -> None:
    """Put test/_test_plugin on this process's ``sys.path`` (and PYTHONPATH), for engines started here."""
    if PLUGIN_DIR not in sys.path:
        sys.path.insert(0, PLUGIN_DIR)
    os.environ["PYTHONPATH"] = plugin_env()["PYTHONPATH"]


def registrations(monkeypatch, variables: dict) -> list:
    """What the test plugin's ``register`` hands ``HookRegistry.register`` ((target, hook, type) per call) with
    exactly ``variables`` of the DDTREE_TEST_* ones set; pytest's ``monkeypatch`` undoes it all after the test."""
    import ddtree_test_hooks
    from sglang.srt.plugins.hook_registry import HookRegistry

    calls = []
    monkeypatch.setattr(HookRegistry, "register", classmethod(lambda cls, *a, **k: calls.append(a)))
    for var in TEST_VARS:
        monkeypatch.delenv(var, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(ddtree_test_hooks, "_registered", None)
    ddtree_test_hooks.register()
    monkeypatch.setattr(ddtree_test_hooks, "_registered", None)
    return calls
