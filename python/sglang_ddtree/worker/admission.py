"""An admission window for DDTREE servers (EXPERIMENTAL, off by default; session 42, not yet measured on a GPU).

``SGLANG_DDTREE_ADMIT_WAIT=N`` (1 .. ``MAX_PASSES``): while a batch is decoding, requests that arrive wait up to N
scheduler passes (about N decode rounds) before they are prefilled, so that arrivals a few rounds apart are prefilled
in one batch instead of one by one. Unset or 0: no window (upstream's scheduling, unchanged).

Why: a speculative engine's requests end rounds apart (their accept lengths differ). Under a client that keeps
``bs`` requests in flight, each finished request's successor then arrives alone and is prefilled alone, and every
prefill pauses the whole decode batch for a scheduler iteration: on the tiny pair a prefill batch ran every ~3.5-4
decode rounds with 1.4-2.6 arrivals each (sessions 38-40), while autoregressive decoding with one output length
ends its requests in the same step and prefills their successors together (session 41: 114 prefill batches in its
engine log against auto's 636 for the same requests). Holding an arrival d rounds costs the batch about one
request's share of each of those rounds (1 / bs of a round per round); a prefill iteration costs about a round, so
the window pays once it gathers more than one arrival. It costs time to first token: up to N rounds for a request
arriving while a batch runs (none when nothing runs).

How: upstream's ``MinFreeSlotsDelayer`` (built for DFLASH-family servers, DDTREE included, when
``--max-running-requests`` >= 8 and ``--min-free-slots-delay`` is unset or > 1; without it there is no window) holds prefills until 2-4 request slots are free, counted against
``--max-running-requests``, so a server whose load stays below that limit never waits. The scheduler asks its
``should_delay`` once a pass while requests wait (never during a chunked prefill); this module's AROUND hook
(registered only when the variable is set: ``worker.hooks.admission_hook_targets``) keeps upstream's answer and adds
the window: delay while a batch runs and fewer than N passes have been delayed since the last admission, then admit
everything waiting. Upstream's rule counts as a delayed pass too, so the two never add up to more than either.
Requests an admission leaves waiting (a burst over the prefill's token budget, or memory) are asked about again in
the very next pass, before any decode round: they are not held again (``count_round``, bumped by the worker's decode
rounds, tells the two apart). Servers other than DDTREE pass straight through.
"""

from __future__ import annotations

import logging
import os
from typing import Tuple

ENV = "SGLANG_DDTREE_ADMIT_WAIT"
MAX_PASSES = 64
_WAITED = "_ddtree_admit_waited"  # on the delayer: passes delayed since the last admission
_PASSES = "_ddtree_admit_passes"  # on the delayer: this server's window (0: not a DDTREE server)
_ADMITTED = "_ddtree_admit_round"  # on the delayer: ``_rounds`` when it last admitted
_rounds = 0  # decode rounds this process has run (count_round)


def count_round() -> None:
    """One decode round ran (the worker calls it each round; an integer increment)."""
    global _rounds
    _rounds += 1


def window_passes(error=ValueError) -> int:
    """The window in scheduler passes from ``ENV`` (0: none). A value that is not an integer in 0 ..
    ``MAX_PASSES`` raises ``error`` in one line naming the variable, the value and what is allowed."""
    raw = os.environ.get(ENV, "").strip()
    if raw == "":
        return 0
    try:
        passes = int(raw)
    except ValueError:
        passes = -1
    if not 0 <= passes <= MAX_PASSES:
        raise error(f"{ENV}={raw!r}: use the scheduler passes (about decode rounds) an arrival may wait while a "
                    f"batch runs, 1 .. {MAX_PASSES}, or 0 for no window.")
    return passes


def start_line(max_running_requests: int, min_free_slots_delay) -> Tuple[int, str]:
    """(logging level, message) for the worker's start-up log when ``ENV`` sets a window: INFO with the window, or a
    WARNING where upstream builds no delayer here (``resolve_min_free_slots`` of this server), so no window either."""
    from sglang.srt.managers.min_free_slots_delayer import resolve_min_free_slots

    passes = window_passes()
    if resolve_min_free_slots(min_free_slots_delay, int(max_running_requests), is_dflash_family=True) is None:
        return logging.WARNING, (
            f"DDTREE: {ENV}={passes} has no effect here: upstream builds no prefill delayer with max running requests "
            f"{int(max_running_requests)} (< 8) or --min-free-slots-delay {min_free_slots_delay} (<= 1).")
    return logging.INFO, (
        f"DDTREE admission window ({ENV}={passes}, experimental): requests arriving while a batch runs wait up to "
        f"{passes} scheduler passes, so that arrivals a few rounds apart are prefilled together.")


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
    if upstream or (running_bs > 0 and waited < passes):
        setattr(delayer, _WAITED, waited + 1)
        return True
    setattr(delayer, _WAITED, 0)  # admitted: the next arrival after a decode round opens a new window
    setattr(delayer, _ADMITTED, _rounds)
    return False
