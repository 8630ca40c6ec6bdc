"""Adapter of the SGLang 0.5.17 family (0.5.17): widths read process-wide.

Upstream's backends, CUDA-graph runners and the scheduler's metrics reporter read the speculative widths
from ``sglang.srt.runtime_context.get_spec()``, which only the target publishes; the hooked functions and
``ServerArgs.override`` are still 0.5.16's. The drafter's widths are therefore scoped on that namespace
(``drafter_widths``), not only written on its copy of the server args.
"""

from __future__ import annotations

from sglang_ddtree.compat import sglang_0_5_16


class Adapter(sglang_0_5_16.Adapter):
    family = "0.5.17"
    own_prefill = False  # worker.prefill is written against 0.5.16's prefill only
    reads_spec_process_wide = True

    def drafter_widths(self, config):
        """The process-wide spec namespace scoped to the drafter's widths, as upstream's own UNO worker gives
        its drafter other widths (``get_spec().override(...)``); restored on exit. Wraps the draft runner's
        construction (its backends and CUDA graphs read the widths there) and each draft forward."""
        from sglang.srt.runtime_context import get_spec

        return get_spec().override(speculative_num_draft_tokens=config.block_size, speculative_eagle_topk=1)
