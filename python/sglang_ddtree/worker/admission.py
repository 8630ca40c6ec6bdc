"""The admission window of DDTREE servers (on by default since session 49; ``SGLANG_DDTREE_ADMIT_WAIT=0`` turns it off).

While at least ``MIN_RUNNING`` requests are decoding, a request that arrives waits up to N scheduler passes (about N
decode rounds; ``SGLANG_DDTREE_ADMIT_WAIT=N``, 1 .. ``MAX_PASSES``, unset: ``DEFAULT_PASSES``) before its prefill, so
that arrivals a few rounds apart are prefilled in one batch instead of one by one. Below ``MIN_RUNNING`` running
requests nobody is held (upstream's own rule still applies).

Why: a speculative engine's requests end rounds apart (their accept lengths differ). Under a client that keeps
``bs`` requests in flight, each finished request's successor then arrives alone and is prefilled alone, and every
prefill pauses the whole decode batch for a scheduler iteration (~3.5-5 ms of host work on the tiny pair, about a
round), while autoregressive decoding with one output length ends its requests in the same step and prefills their
successors together (session 41: 114 prefill batches in its engine log against auto's 636 for the same requests).
Holding an arrival d passes costs the batch about d / bs of a round (one idle slot); a prefill iteration costs about a
round, so the window pays where the batch is large and loses where it is small. Measured (session 49, H100, fa3, the
tiny pair, paired, ``benchmark/results/session49/notes.md``): N = 8 against no window 1.09 / 1.21 / 1.07x at bs 16 /
48 / 64 with one output length and 1.16 / 1.01x at bs 16 / 48 with lengths spread, but 0.90 / 0.97x at bs 4 / 8
(N = 4: 0.98 / 0.93x): hence ``MIN_RUNNING``, between the batches where it lost and where it paid. It costs time to
first token: served at 16 / 48 concurrent requests (budget 63, 3 repetitions) the median went from 13.4-15.1 /
18.7-32.1 ms to 21.8-24.2 / 30.2-48.9 ms, plain decoding's being 19.5-22.0 / 36.1-42.7 ms.

How: upstream's ``MinFreeSlotsDelayer`` (built for DFLASH-family servers, DDTREE included, when
``--max-running-requests`` >= 8 and ``--min-free-slots-delay`` is unset or > 1; without it there is no window) holds
prefills until 2-4 request slots are free, counted against ``--max-running-requests``, so a server whose load stays
below that limit never waits. The scheduler asks its ``should_delay`` once a pass while requests wait (never during a
chunked prefill); this module's AROUND hook (``worker.hooks.admission_hook_targets``) keeps upstream's answer and adds
the window: delay while at least ``MIN_RUNNING`` requests run and fewer than N passes have been delayed since the last
admission, then admit everything waiting. Upstream's rule counts as a delayed pass too, so the two never add up to
more than either. Requests an admission leaves waiting (a burst over the prefill's token budget, or memory) are asked
about again in the very next pass, before any decode round: they are not held again (``count_round``, bumped by the
worker's decode rounds, tells the two apart). Servers other than DDTREE pass straight through.
"""

from __future__ import annotations

import logging
import os
from typing import Tuple

ENV = "SGLANG_DDTREE_ADMIT_WAIT"
MAX_PASSES = 64
DEFAULT_PASSES = 8  # the window with the variable unset (session 49's A/B: 8 and 16 both paid at bs 16-64, 8 at bs 16 more)
MIN_RUNNING = 12  # nobody is held while fewer requests run (session 49: the window lost at bs 4 / 8, paid at 16 / 48 / 64)
_WAITED = "_ddtree_admit_waited"  # on the delayer: passes delayed since the last admission
_PASSES = "_ddtree_admit_passes"  # on the delayer: this server's window (0: not a DDTREE server)
_ADMITTED = "_ddtree_admit_round"  # on the delayer: ``_rounds`` when it last admitted
_rounds = 0  # decode rounds this process has run (count_round)


def count_round() -> None:
    """One decode round ran (the worker calls it each round; an integer increment)."""
    global _rounds
    _rounds += 1


def window_passes(error=ValueError) -> int:
    """The window in scheduler passes from ``ENV`` (unset or blank: ``DEFAULT_PASSES``; 0: none). A value that is not
    an integer in 0 .. ``MAX_PASSES`` raises ``error`` in one line naming the variable, the value and what is
    allowed."""
    raw = os.environ.get(ENV, "").strip()
    if raw == "":
        return DEFAULT_PASSES
    try:
        passes = int(raw)
    except ValueError:
        passes = -1
    if not 0 <= passes <= MAX_PASSES:
        raise error(f"{ENV}={raw!r}: use the scheduler passes (about decode rounds) an arrival may wait while a "
                    f"batch runs, 1 .. {MAX_PASSES}, or 0 for no window.")
    return passes


def _is_default() -> bool:
    return os.environ.get(ENV, "").strip() == ""


def start_line(max_running_requests: int, min_free_slots_delay) -> Tuple[int, str]:
    """(logging level, message) for the worker's start-up log while ``window_passes()`` is not 0: INFO with the
    window, or where upstream builds no delayer here (``resolve_min_free_slots`` of this server), so no window either,
    a WARNING if ``ENV`` asked for one and INFO for the default."""
    from sglang.srt.managers.min_free_slots_delayer import resolve_min_free_slots

    passes = window_passes()
    setting = f"{ENV}={passes}" + (" (the default)" if _is_default() else "")
    if resolve_min_free_slots(min_free_slots_delay, int(max_running_requests), is_dflash_family=True) is None:
        return (logging.INFO if _is_default() else logging.WARNING), (
            f"DDTREE: the admission window ({setting}) has no effect here: upstream builds no prefill delayer with "
            f"max running requests {int(max_running_requests)} (< 8) or --min-free-slots-delay {min_free_slots_delay} "
            f"(<= 1).")
    return logging.INFO, (
        f"DDTREE admission window ({setting}; 0 turns it off): while at least {MIN_RUNNING} requests decode, requests "
        f"that arrive wait up to {passes} scheduler passes, so that arrivals a few rounds apart are prefilled together.")


def _server_passes() -> int:
    """The window of this process's server: ``window_passes()`` on a validated DDTREE server, else 0."""
    from sglang_ddtree.config import is_validated_ddtree_args

    try:
        from sglang.srt.runtime_context import get_server_args

        server_args = get_server_args()
    except (ImportError, ValueError):  # not published in this process: not a DDTREE scheduler
        return 0
    return window_passes() if is_validated_ddtree_args(server_args) else 0  # the worker logs it at start


def should_delay(original, delayer, *, running_bs: int, num_allocatable_reqs: int) -> bool:
    """AROUND hook of ``MinFreeSlotsDelayer.should_delay``: upstream's answer, or the window's (module docstring).
    Host arithmetic on two counters kept on the delayer; no device work."""
    upstream = original(delayer, running_bs=running_bs, num_allocatable_reqs=num_allocatable_reqs)
    passes = getattr(delayer, _PASSES, None)
    if passes is None:  # first call in this process: decide once
        passes = _server_passes()
        setattr(delayer, _PASSES, passes)
    if not passes:
        return upstream
    if getattr(delayer, _ADMITTED, None) == _rounds and not upstream:
        return False  # left waiting by the last admission, no decode round since: not held again
    waited = getattr(delayer, _WAITED, 0)
    if upstream or (running_bs >= MIN_RUNNING and waited < passes):
        setattr(delayer, _WAITED, waited + 1)
        return True
    setattr(delayer, _WAITED, 0)  # admitted: the next arrival after a decode round opens a new window
    setattr(delayer, _ADMITTED, _rounds)
    return False
