"""Which attention backends can run DDTREE's tree verify (VERIFY step), and which one DDTREE picks.

The target's prefill and decode backends both serve the tree verify (a TARGET_VERIFY forward with the
ancestor-only FULL_MASK). A backend is allowed only once its tree verify has been tested with DDTREE on
a GPU (node-by-node verify logits, greedy parity); the others are refused at argument validation with
the reason. Used by ``server_args`` (the default choice), ``validation`` (the refusals) and ``doctor``.
Imports neither torch nor SGLang.
"""

from __future__ import annotations

# Target attention backends whose tree-mask verify path has been tested with DDTREE on a GPU.
TESTED_TARGET_ATTENTION_BACKENDS = ("triton", "flashinfer")

# Backends that can never run a tree verify, and why.
UNSUPPORTED_TARGET_BACKENDS = {
    "trtllm_mha": "it has no custom (tree) attention mask",
}

# Chosen for the target when the user names no attention backend at all.
DEFAULT_TARGET_ATTENTION_BACKEND = "triton"


def tested_backends_text() -> str:
    """'triton or flashinfer': the backends to suggest in an error message."""
    return " or ".join(TESTED_TARGET_ATTENTION_BACKENDS)


def refusal_reason(backend: str) -> str:
    """Why DDTREE refuses ``backend`` for the target (for an error message)."""
    return UNSUPPORTED_TARGET_BACKENDS.get(backend, "its tree-mask verify path is untested with DDTREE")
