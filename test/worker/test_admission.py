"""DDTREE's admission window (``worker.admission``, SGLANG_DDTREE_ADMIT_WAIT, on by default): the variable, the hook's
registration, and the decisions it adds to upstream's ``MinFreeSlotsDelayer`` (the real class of the installed
SGLang), as the scheduler asks them once a pass while requests wait. A malformed value at a DDTREE server's start:
``test/plugin/test_server_args.py``."""

import inspect
from types import SimpleNamespace

import pytest

from sglang_ddtree.worker import admission, hooks


@pytest.mark.parametrize("value,want", [("", 8), (" ", 8), ("0", 0), ("1", 1), (" 4 ", 4), ("64", 64)])
def test_the_variable(monkeypatch, value, want):
    monkeypatch.setenv(admission.ENV, value)
    assert admission.window_passes() == want
    monkeypatch.delenv(admission.ENV)
    assert admission.window_passes() == admission.DEFAULT_PASSES == 8  # unset: the default window


@pytest.mark.parametrize("value", ["-1", "65", "4.5", "on", "1e3"])
def test_a_malformed_variable_is_one_line_naming_it_and_what_is_allowed(monkeypatch, value):
    monkeypatch.setenv(admission.ENV, value)
    with pytest.raises(ValueError) as err:
        admission.window_passes()
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"SGLANG_DDTREE_ADMIT_WAIT={value!r}: ")
    assert "1 .. 64, or 0 for no window" in message


def test_the_hook_is_registered_unless_the_window_is_off(monkeypatch):
    monkeypatch.delenv(admission.ENV, raising=False)
    assert hooks.admission_hook_targets() == hooks.ADMISSION_HOOK_TARGETS  # the default window
    monkeypatch.setenv(admission.ENV, "0")
    assert hooks.admission_hook_targets() == {}
    monkeypatch.setenv(admission.ENV, "bad")  # validation says why; the plugin's loading does not fail
    assert hooks.admission_hook_targets() == {}
    monkeypatch.setenv(admission.ENV, "4")
    assert hooks.admission_hook_targets() == hooks.ADMISSION_HOOK_TARGETS and len(hooks.ADMISSION_HOOK_TARGETS) == 1
    (target,) = hooks.ADMISSION_HOOK_TARGETS
    from sglang_ddtree import compat

    assert compat.resolve(target) is not None  # upstream has it (and the compat list names it: test_compat_scan)


def _delayer(monkeypatch, *, ddtree=True, passes="4", min_free_slots=4):
    if passes is None:
        monkeypatch.delenv(admission.ENV, raising=False)
    else:
        monkeypatch.setenv(admission.ENV, passes)
    return _stepper(monkeypatch, ddtree=ddtree, min_free_slots=min_free_slots)


def _stepper(monkeypatch, *, ddtree, min_free_slots):
    """Upstream's delayer with the hook around its ``should_delay``, in a process whose published server args are
    (or are not) a validated DDTREE server's. Returns ``step(running_bs, free, waiting=True)``: one scheduler pass.
    While requests wait the scheduler asks the delayer; a held pass (or one with nobody waiting) runs a decode round
    (``count_round``, as the worker does), an admitting pass runs the prefill instead."""
    from sglang.srt.managers.min_free_slots_delayer import MinFreeSlotsDelayer

    args = SimpleNamespace(speculative_algorithm="DDTREE" if ddtree else "DFLASH", speculative_ddtree_budget=15,
                           speculative_ddtree_topk=4, speculative_dflash_block_size=16)
    import sglang.srt.runtime_context as rc

    monkeypatch.setattr(rc, "get_server_args", lambda: args)
    delayer = MinFreeSlotsDelayer(min_free_slots=min_free_slots)
    # upstream's own method, also where an engine earlier in this process had the registry wrap it (the default window)
    original = inspect.unwrap(MinFreeSlotsDelayer.should_delay)

    def step(running_bs, free, waiting=True):
        held = waiting and hooks.admission_should_delay(original, delayer, running_bs=running_bs,
                                                        num_allocatable_reqs=free)
        if not waiting or held:
            admission.count_round()
        return held if waiting else None

    return step


def test_arrivals_wait_up_to_the_window_then_all_are_admitted(monkeypatch):
    step = _delayer(monkeypatch, passes="4")
    # a batch of 47 runs with 17 free slots (upstream would admit at once): 4 passes held, the 5th admits
    assert [step(47, 17) for _ in range(5)] == [True, True, True, True, False]
    step(48, 16, waiting=False)  # a decode round with nobody waiting
    # the next arrival opens a new window
    assert [step(46, 18) for _ in range(5)] == [True, True, True, True, False]
    # nothing running: no reason to hold anyone
    step(46, 18, waiting=False)
    assert step(0, 64) is False
    step(1, 63, waiting=False)
    # upstream's rule still holds (fewer free slots than its minimum), and its passes count toward the window
    assert [step(62, 2) for _ in range(6)] == [True] * 6
    assert step(60, 4) is False  # slots free again and the window long spent: admitted at once


def test_requests_an_admission_left_waiting_are_not_held_again(monkeypatch):
    """A burst the prefill's token budget (or memory) cannot take at once: the rest is asked about in the very next
    pass, before any decode round, and goes in at once; the window opens again only after a decode round."""
    step = _delayer(monkeypatch, passes="4")
    assert [step(40, 24) for _ in range(5)] == [True, True, True, True, False]
    assert [step(42, 22) for _ in range(3)] == [False, False, False]  # three more prefill passes of the burst
    step(45, 19, waiting=False)
    assert [step(45, 19) for _ in range(5)] == [True, True, True, True, False]  # a later arrival: a new window
    # upstream's own rule is kept for the leftovers too
    assert step(62, 2) is True


def test_upstream_alone_where_no_window_or_not_ddtree(monkeypatch):
    for kw in (dict(passes="0"), dict(ddtree=False)):
        step = _delayer(monkeypatch, **kw)
        assert [step(47, 17) for _ in range(3)] == [False] * 3  # upstream admits
        assert step(62, 2) is True  # upstream delays


def test_the_window_is_decided_once_per_delayer(monkeypatch):
    step = _delayer(monkeypatch, passes="2")
    assert [step(20, 30) for _ in range(3)] == [True, True, False]
    monkeypatch.setenv(admission.ENV, "0")  # read once, at the delayer's first question
    step(20, 30, waiting=False)
    assert [step(20, 30) for _ in range(3)] == [True, True, False]


def test_the_default_window_holds_only_a_large_enough_batch(monkeypatch):
    """Unset: 8 passes, and only while at least MIN_RUNNING (12) requests run (session 49: the window lost at bs 4 /
    8 and paid at 16 / 48 / 64); below that only upstream's own rule holds anyone."""
    step = _delayer(monkeypatch, passes=None)
    assert admission.MIN_RUNNING == 12
    assert [step(15, 49) for _ in range(9)] == [True] * 8 + [False]  # 15 running: held 8 passes, then admitted
    step(16, 48, waiting=False)
    assert [step(12, 52) for _ in range(9)] == [True] * 8 + [False]  # exactly MIN_RUNNING: held
    step(12, 52, waiting=False)
    assert [step(11, 53) for _ in range(3)] == [False] * 3  # 11 running: admitted at once
    for running in (1, 4, 8):
        step(running, 64 - running, waiting=False)
        assert step(running, 64 - running) is False
    step(7, 1, waiting=False)
    assert step(7, 1) is True  # upstream's rule (fewer free slots than its minimum) still holds a small batch


def test_the_start_line_says_the_window_or_why_there_is_none(monkeypatch):
    import logging

    monkeypatch.setenv(admission.ENV, "4")
    level, line = admission.start_line(64, None)
    assert level == logging.INFO and line.startswith("DDTREE admission window (SGLANG_DDTREE_ADMIT_WAIT=4; 0 turns it off)")
    assert "while at least 12 requests decode" in line and "up to 4 scheduler passes" in line
    for max_running, user in ((4, None), (64, 1), (64, 0)):  # upstream builds no delayer: no window either
        level, line = admission.start_line(max_running, user)
        assert level == logging.WARNING and "(SGLANG_DDTREE_ADMIT_WAIT=4) has no effect here" in line, (max_running, user)
    monkeypatch.delenv(admission.ENV)  # the default: said at INFO, and not a warning where there is no delayer
    level, line = admission.start_line(48, None)
    assert level == logging.INFO and "(SGLANG_DDTREE_ADMIT_WAIT=8 (the default); 0 turns it off)" in line
    level, line = admission.start_line(4, None)
    assert level == logging.INFO and "(SGLANG_DDTREE_ADMIT_WAIT=8 (the default)) has no effect here" in line


def test_the_hook_wraps_upstreams_method_as_the_registry_applies_it(monkeypatch):
    """Through SGLang's own ``HookRegistry`` patching (as ``load_plugins`` applies ``install_hooks``' registrations),
    the scheduler's call ``delayer.should_delay(running_bs=..., num_allocatable_reqs=...)`` reaches the window."""
    from sglang.srt.managers.min_free_slots_delayer import MinFreeSlotsDelayer
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from sglang_ddtree.compat import adapter

    # upstream's own method (unwrapped: an engine earlier in this process may have had the registry wrap it), restored
    # after
    monkeypatch.setattr(MinFreeSlotsDelayer, "should_delay", inspect.unwrap(MinFreeSlotsDelayer.should_delay))
    _delayer(monkeypatch, passes="2")  # the env and the published DDTREE server args
    (target, hook), = hooks.admission_hook_targets().items()
    HookRegistry._apply_target(target, [(HookType.AROUND, adapter().adapt_hook(target, hook), None)])
    delayer = MinFreeSlotsDelayer(min_free_slots=4)
    asked = [delayer.should_delay(running_bs=20, num_allocatable_reqs=44) for _ in range(3)]
    assert asked == [True, True, False]
    assert delayer.should_delay(running_bs=62, num_allocatable_reqs=2) is True  # upstream's own rule


def test_the_admission_line_is_logged_once_the_targets_pool_exists(monkeypatch, caplog):
    """``SGLANG_DDTREE_ADMIT_WAIT``'s start-up line reads the target's max running requests, which the scheduler's
    pool allocation sets after the draft worker's ``__init__`` (read there, the engine died at start: 'ModelRunner'
    object has no attribute 'max_running_requests', H100, session 43). So the draft worker's own
    ``alloc_memory_pool``, which the scheduler calls after the target's, logs it."""
    import contextlib
    import logging
    import types

    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    from sglang_ddtree.compat import adapter
    from sglang_ddtree.config import DDTreeConfig
    from sglang_ddtree.worker import worker as worker_mod

    monkeypatch.setattr(DFlashWorkerV2, "alloc_memory_pool", lambda self, *args, **kwargs: "pools")
    # the drafter's widths scope (tested above) needs a published spec from 0.5.17; not this test's subject
    monkeypatch.setattr(type(adapter()), "drafter_widths", lambda self, config: contextlib.nullcontext())
    monkeypatch.setattr(worker_mod, "get_tp_group", lambda: types.SimpleNamespace(rank_in_group=0))
    w = worker_mod.DDTreeWorker.__new__(worker_mod.DDTreeWorker)
    w.config = DDTreeConfig(budget=15, topk=4, block_size=8)
    runner = types.SimpleNamespace(server_args=types.SimpleNamespace(min_free_slots_delay=None))
    w._target_worker = types.SimpleNamespace(model_runner=runner)  # what `target_worker` returns
    caplog.set_level(logging.INFO, logger=worker_mod.logger.name)
    monkeypatch.setenv(admission.ENV, "0")
    assert w.alloc_memory_pool("pool_config") == "pools" and not caplog.records  # no window: nothing read or said
    monkeypatch.setenv(admission.ENV, "4")
    runner.max_running_requests = 48  # what the target's pool allocation set
    assert w.alloc_memory_pool("pool_config") == "pools"
    [record] = caplog.records
    assert record.levelno == logging.INFO and "SGLANG_DDTREE_ADMIT_WAIT=4" in record.getMessage()
