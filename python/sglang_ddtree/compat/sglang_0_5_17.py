"""Adapter of the SGLang 0.5.17 family (0.5.17): widths read process-wide.

Upstream's backends, CUDA-graph runners and the scheduler's metrics reporter read the speculative widths
from ``sglang.srt.runtime_context.get_spec()``, which only the target publishes; the hooked functions and
``ServerArgs.override`` are still 0.5.16's.
"""

from __future__ import annotations

from sglang_ddtree.compat import sglang_0_5_16


class Adapter(sglang_0_5_16.Adapter):
    family = "0.5.17"
    reads_spec_process_wide = True
