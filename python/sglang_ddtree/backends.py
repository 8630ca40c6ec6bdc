"""Which attention backends can run DDTREE's tree verify (VERIFY step), and which one DDTREE picks.

The target's prefill and decode backends both serve the tree verify (a TARGET_VERIFY forward with the
ancestor-only FULL_MASK). A backend is allowed only once its tree verify has been tested with DDTREE on
a GPU (node-by-node verify logits, greedy parity); the others are refused at argument validation with
the reason. Used by ``server_args`` (the default choice), ``validation`` (the refusals) and ``doctor``.
Imports neither torch nor SGLang.
"""

from __future__ import annotations

# Target attention backends whose tree-mask verify path has been tested with DDTREE on a GPU. fa3 (SGLang's
# default on Hopper) runs a topk > 1 verify as cascade attention: the prefix part, then every tree row as
# its own length-1 query over the tree columns its FULL_MASK row keeps (flashattention_backend.py), so it
# reads the same mask as triton and flashinfer. It is a Hopper (sm_90) kernel library.
TESTED_TARGET_ATTENTION_BACKENDS = ("triton", "flashinfer", "fa3")

# Backends that can never run a tree verify, and why.
UNSUPPORTED_TARGET_BACKENDS = {
    "trtllm_mha": "it has no custom (tree) attention mask",
}

# Chosen for the target when the user names no attention backend at all: fa3 on Hopper when its kernel
# library is installed (SGLang's own Hopper default, so what a DFLASH baseline there runs on; on the tiny pair
# DDTREE decodes as fast on fa3 as on triton, paired H200 medians within noise, benchmark/results/
# paired_fa3_h200_session5.json), else triton (tested everywhere SGLang runs; flashinfer JIT-compiles for
# minutes at a first start).
FALLBACK_TARGET_ATTENTION_BACKEND = "triton"
HOPPER_TARGET_ATTENTION_BACKEND = "fa3"


def tested_backends_text() -> str:
    """'triton, flashinfer or fa3': the backends to suggest in an error message."""
    *head, last = TESTED_TARGET_ATTENTION_BACKENDS
    return f"{', '.join(head)} or {last}" if head else last


def fa3_library_installed() -> bool:
    """Whether sgl_kernel's FA3 library (``flash_ops``, 1.1 GB, left out of some installs) is on disk; found
    without importing it."""
    import importlib.util
    import os

    try:
        spec = importlib.util.find_spec("sgl_kernel")
    except (ImportError, ValueError):
        return False
    dirs = list(spec.submodule_search_locations or []) if spec is not None else []
    return any(name.startswith("flash_ops") for d in dirs if os.path.isdir(d) for name in os.listdir(d))


def cuda_capability():
    """(major, minor) of GPU 0, or None without a CUDA GPU (or torch)."""
    try:
        import torch

        return tuple(torch.cuda.get_device_capability(0)) if torch.cuda.is_available() else None
    except Exception:  # a broken driver install: the server fails later with its own message
        return None


def default_target_attention_backend(capability=None, fa3_installed=None):
    """(backend, why) for the target when the user names none: fa3 on Hopper (sm_90) with the FA3 library
    installed, else triton. ``capability`` / ``fa3_installed`` default to this machine's."""
    capability = cuda_capability() if capability is None else tuple(capability)
    if capability is not None and capability[0] == 9:
        if fa3_installed if fa3_installed is not None else fa3_library_installed():
            return HOPPER_TARGET_ATTENTION_BACKEND, "Hopper GPU (sm_90): SGLang's fa3 default"
        return FALLBACK_TARGET_ATTENTION_BACKEND, "Hopper GPU, but sgl_kernel's FA3 library is not installed"
    arch = f"sm_{capability[0]}{capability[1]}" if capability is not None else "no CUDA GPU visible"
    return FALLBACK_TARGET_ATTENTION_BACKEND, f"{arch}: fa3 is a Hopper kernel library"


def refusal_reason(backend: str) -> str:
    """Why DDTREE refuses ``backend`` for the target (for an error message)."""
    return UNSUPPORTED_TARGET_BACKENDS.get(backend, "its tree-mask verify path is untested with DDTREE")
