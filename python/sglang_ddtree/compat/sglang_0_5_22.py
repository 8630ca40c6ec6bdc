"""Adapter of the SGLang 0.5.22 family (0.5.22): attention data parallelism is ``--attn-dp-size``.

``--attn-dp-size N`` replaces ``--dp-size N --enable-dp-attention`` (still accepted, deprecated: resolution turns it
into ``attn_dp_size = N`` and declares ``enable_dp_attention`` false). DDTREE refuses attention DP by the width.
"""

from __future__ import annotations

from sglang_ddtree.compat import sglang_0_5_21


class Adapter(sglang_0_5_21.Adapter):
    family = "0.5.22"

    def attention_dp_flag(self, view):
        if int(view.attn_dp_size) > 1:
            return f"--attn-dp-size {int(view.attn_dp_size)}"
        return "--enable-dp-attention" if view.enable_dp_attention else None
