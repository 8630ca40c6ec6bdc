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

# Tested backends that run only on some GPU generations: backend -> (compute-capability majors, why). fa3 is
# sgl_kernel's FlashAttention 3 library; upstream's attention_registry asserts SM 8.x / 9.x only when the model
# runner builds the backend, after the weights have loaded, so on Blackwell (sm_100 / sm_120) DDTREE refuses it
# at argument validation instead. triton and flashinfer run on every CUDA GPU SGLang supports.
ARCH_LIMITED_BACKENDS = {
    "fa3": ((8, 9), "FlashAttention 3 (sgl_kernel's flash_ops) runs on Hopper sm_90 / Ampere sm_80 only"),
}

# Chosen for the target when the user names no attention backend at all: the fastest tested one measured for
# DDTREE on the GPU at hand (``default_target_backend``). On Hopper (sm_90) with sgl_kernel's FA3 library and
# DDTREE's fused tree attention on (``worker.fa3_tree``) that is fa3, SGLang's own Hopper default: at the
# Qwen3-8B shape on the H200 (budget 15, paired) the fused fa3 round beat fa3's cascade at every concurrency,
# 6.86 / 7.34 / 17.71 / 36.06 against 7.36 / 8.96 / 20.36 / 43.14 ms at c 1 / 8 / 32 / 64
# (benchmark/results/shape_8b_auto_h200_session9.json), and the cascade was within 2.5 % of triton at c 1 and
# 5 % faster at c 32 (7.40 vs 7.22, 20.06 vs 21.19 ms, shape_8b_h200_session7.json); on the tiny pair fa3 and
# triton are within run-to-run noise (DDTREE b63 0.96 / 0.93 / 1.00 of triton at bs 1 / 16 / 48,
# paired_tiny_pair_h200_session9.json). Everywhere else triton: the backend tested on every GPU (flashinfer
# JIT-compiles for minutes at a first start; fa3 without the fused path was not faster than triton on the tiny
# pair, paired_fa3_h200_session5*.json).
DEFAULT_TARGET_ATTENTION_BACKEND = "triton"
DEFAULT_REASON = "the tested tree-verify backend that runs on every GPU"
HOPPER_TARGET_ATTENTION_BACKEND = "fa3"
HOPPER_REASON = ("Hopper with sgl_kernel's FA3 library and DDTREE's fused tree attention: the fastest tested "
                 "tree verify measured for DDTREE on the H200")


def default_target_backend(capability, *, fa3_installed, fa3_fused) -> "tuple[str, str]":
    """(backend, why) DDTREE picks for the target when the user names none: fa3 on Hopper (compute capability
    9.x) when sgl_kernel's FA3 library is installed and the fused tree attention is on; triton otherwise
    (capability None: no visible GPU). ``fa3_installed`` / ``fa3_fused``: bools, or callables asked only on
    Hopper."""
    def ask(x):
        return bool(x() if callable(x) else x)

    if capability is not None and capability[0] == 9 and ask(fa3_installed) and ask(fa3_fused):
        return HOPPER_TARGET_ATTENTION_BACKEND, HOPPER_REASON
    return DEFAULT_TARGET_ATTENTION_BACKEND, DEFAULT_REASON


def tested_backends_text() -> str:
    """'triton, flashinfer or fa3': the backends to suggest in an error message."""
    *head, last = TESTED_TARGET_ATTENTION_BACKENDS
    return f"{', '.join(head)} or {last}" if head else last


def fa3_library_installed() -> bool:
    """Whether sgl_kernel's FA3 library (``flash_ops``, 1.1 GB, left out of some installs) is on disk; found
    without importing it (for the doctor)."""
    import importlib.util
    import os

    try:
        spec = importlib.util.find_spec("sgl_kernel")
    except (ImportError, ValueError):
        return False
    dirs = list(spec.submodule_search_locations or []) if spec is not None else []
    return any(name.startswith("flash_ops") for d in dirs if os.path.isdir(d) for name in os.listdir(d))


def refusal_reason(backend: str) -> str:
    """Why DDTREE refuses ``backend`` for the target (for an error message)."""
    return UNSUPPORTED_TARGET_BACKENDS.get(backend, "its tree-mask verify path is untested with DDTREE")


def arch_refusal(backend: str, capability) -> "str | None":
    """Why ``backend`` cannot run on a GPU of compute ``capability`` (major, minor), or None when it can (or
    when the capability is unknown: None)."""
    if capability is None or backend not in ARCH_LIMITED_BACKENDS:
        return None
    majors, why = ARCH_LIMITED_BACKENDS[backend]
    if capability[0] in majors:
        return None
    return f"{why}, and this GPU is sm_{capability[0]}{capability[1]}"


def backends_for_capability(capability) -> tuple:
    """The tested target backends that run on a GPU of compute ``capability`` (for messages)."""
    return tuple(b for b in TESTED_TARGET_ATTENTION_BACKENDS if arch_refusal(b, capability) is None)
