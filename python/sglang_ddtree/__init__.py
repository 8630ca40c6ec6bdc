"""sglang-ddtree: DDTree speculative decoding (block-diffusion draft trees) for upstream SGLang.

The package plugs into SGLang through its plugin framework (entry point group
``sglang.srt.plugins`` -> :func:`sglang_ddtree.plugin.register`). Importing this package is cheap:
it does not import SGLang or torch; heavy modules are imported lazily where they are used.

Round of DDTree decoding: draft (one DFlash block forward) -> build tree (top-``budget`` prefixes)
-> verify (one target forward with an ancestor-only mask) -> accept (longest matching path + bonus
token) -> commit (KV and draft context of the accepted path).
"""

from sglang_ddtree.version import (
    SUPPORTED_SGLANG_MAX_EXCLUSIVE,
    SUPPORTED_SGLANG_MIN,
    SUPPORTED_SGLANG_SPEC,
    __version__,
)

__all__ = [
    "__version__",
    "SUPPORTED_SGLANG_MIN",
    "SUPPORTED_SGLANG_MAX_EXCLUSIVE",
    "SUPPORTED_SGLANG_SPEC",
]
