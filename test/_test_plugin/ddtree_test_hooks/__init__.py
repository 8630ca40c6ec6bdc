"""TEST-ONLY SGLang plugin of sglang-ddtree's test suite: hooks on the DDTREE worker, from outside.

Found by SGLang's own plugin loader (entry point ``ddtree_test`` of group ``sglang.srt.plugins``,
declared by the ``ddtree_test_hooks-0.0.0.dist-info`` beside this package) in every process whose
``sys.path`` holds ``test/_test_plugin`` (``test/worker/_test_plugin_env.py`` builds that environment).
``register`` reads ``env`` once and registers, through ``HookRegistry``, only the hooks asked for:
  DRAFT   AFTER ``DDTreeWorker._draft``: the draft oracle's plan, or the top-K order reversed;
  BUILD   AFTER ``worker.verify_topology``: the FULL_MASK's tree part corrupted (control of a test);
  VERIFY  AFTER ``DDTreeWorker._verify``: the first rounds' trees and verify logits saved to disk;
  WIDTH   AFTER ``widths.AutoWidth.choose`` (budget auto): a fixed cycle of buckets, a new width every round;
          or one pinned bucket every round.
  COMPILE AFTER ``DDTreeWorker._warm_round_kernels`` and ``DDTreeWorker._decode_round``: the round kernels'
          Triton compiles after the start-up warm-up, logged (``compile_watch``).
  HYBRID  a deliberate state fault: AFTER ``worker.hybrid.last_accepted_rows`` (commit row accept_len - 1), or
          AFTER ``worker.verify_topology`` (children linked highest row first: only the hybrid kernels read them).
  FLOOR   AROUND ``DDTreeWorker._decode_round``: the least a width-0 round can do instead (``floor_round``).
  PHASES  AROUND chosen scheduler and worker functions: wall time per decode iteration (``phase_times``); or
          (SYNC_WATCH) the loop's steps and host waits only, with every synchronizing CUDA call counted by site.
With none of the variables set it registers nothing. The production package knows none of this.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

WORKER = "sglang_ddtree.worker.worker"
DRAFT_TARGET = f"{WORKER}.DDTreeWorker._draft"
VERIFY_TARGET = f"{WORKER}.DDTreeWorker._verify"
TOPOLOGY_TARGET = f"{WORKER}.verify_topology"  # the worker's own binding (``from ... import verify_topology``)
CHOOSE_TARGET = "sglang_ddtree.worker.widths.AutoWidth.choose"
WARM_TARGET = f"{WORKER}.DDTreeWorker._warm_round_kernels"
ROUND_TARGET = f"{WORKER}.DDTreeWorker._decode_round"
COMMIT_ROWS_TARGET = "sglang_ddtree.worker.hybrid.last_accepted_rows"  # looked up at call time by HybridStateCommit

_registered = None  # the HookEnv registered in this process, once


def planned_hooks(env) -> list:
    """[(target, hook function)] of type AFTER that ``env`` (a ``HookEnv``) asks for."""
    from ddtree_test_hooks import hooks

    out = []
    if env.draft_oracle:
        out.append((DRAFT_TARGET, hooks.after_draft_oracle))
    if env.reverse_ranks:
        out.append((DRAFT_TARGET, hooks.after_draft_reverse_ranks))
    if env.corrupt_mask:
        out.append((TOPOLOGY_TARGET, hooks.after_verify_topology_corrupt))
    if env.verify_dump:
        out.append((VERIFY_TARGET, hooks.after_verify_dump))
    if env.cycle_budgets:
        out.append((CHOOSE_TARGET, hooks.after_choose_cycle))
    if env.pin_budget >= 0:
        out.append((CHOOSE_TARGET, hooks.after_choose_pin))
    if env.compile_log:
        out.append((WARM_TARGET, hooks.after_warm_compile_baseline))
        out.append((ROUND_TARGET, hooks.after_round_compile_check))
    if env.hybrid_fault == "chain_commit":
        out.append((COMMIT_ROWS_TARGET, hooks.after_last_accepted_rows_chain))
    if env.hybrid_fault == "reversed_siblings":
        out.append((TOPOLOGY_TARGET, hooks.after_verify_topology_reverse_siblings))
    return out


def register() -> None:
    """Entry point: register the hooks the environment asks for (idempotent; nothing when none)."""
    global _registered
    if _registered is not None:
        return
    from ddtree_test_hooks import hooks
    from ddtree_test_hooks.env import HookEnv

    env = HookEnv.from_env()
    _registered = env
    if not env.any:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    hooks.configure(env)
    for target, fn in planned_hooks(env):
        HookRegistry.register(target, fn, HookType.AFTER)
    if env.floor_round:
        from ddtree_test_hooks.floor_round import floor_round

        HookRegistry.register(ROUND_TARGET, floor_round, HookType.AROUND)
    if env.phase_times or env.sync_watch:
        from ddtree_test_hooks import phase_times

        for target, fn in phase_times.planned(env.phase_times or env.sync_watch, sync_watch=bool(env.sync_watch),
                                              split=env.phase_split):
            HookRegistry.register(target, fn, HookType.AROUND)
    logger.warning("!!! DDTREE TEST HOOKS REGISTERED (%s): for tests only. !!!",
                   ", ".join(f"{t.rsplit('.', 1)[-1]}:{f.__name__}" for t, f in planned_hooks(env)))
