"""Shared helpers of the tree-op wrappers: argument checks, backend choice, launch sizes.

Serves every step the tree package implements (build tree, verify topology, accept). Checks raise
``ValueError`` for caller mistakes; a fallback from Triton to PyTorch logs one warning.
"""

from __future__ import annotations

import functools
import logging
import os

import torch

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "triton", "torch")

# How the Triton topology kernel writes the FULL_MASK (all give the same bytes; see topology.py):
# "fused" one kernel, byte stores; "fill_then_tree" fill_(True) of the
# buffer, then the kernel writes only the tree columns; "wide" one kernel, 16-byte-aligned word stores;
# "fill_then_wide" fill_(True), then the tree columns as words.
FULL_MASK_IMPLS = ("fused", "fill_then_tree", "wide", "fill_then_wide")
FULL_MASK_IMPL_ENV = "SGLANG_DDTREE_FULL_MASK_IMPL"
# "wide": measured fastest on the H200 (benchmark/results/bench_tree.json, session 3: topology at bs 64 /
# budget 512 / prefix 1024 0.046 ms vs 0.067 for "fused"; byte-exact at every measured shape).
DEFAULT_FULL_MASK_IMPL = "wide"


def next_pow2(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


def check(t: torch.Tensor, name: str, dtype: torch.dtype, ndim: int, device: torch.device) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise ValueError(f"{name} must be {dtype}, got {t.dtype}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dims, got shape {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, expected {device}")


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


_TREE_DTYPES = (
    ("token_ids", torch.int64),
    ("parents", torch.int64),
    ("depths", torch.int64),
    ("scores", torch.float32),
    ("valid", torch.bool),
)


def check_tree(tree) -> None:
    """Host-only checks of a Tree's fields: dtype, [bs, N] shape, one device, contiguous (kernels index rows)."""
    shape, dev = tree.parents.shape, tree.parents.device
    for name, dtype in _TREE_DTYPES:
        t = getattr(tree, name)
        check(t, f"tree.{name}", dtype, 2, dev)
        if t.shape != shape or not t.is_contiguous():
            raise ValueError(f"tree.{name} must be contiguous {tuple(shape)}, got {tuple(t.shape)}")
    if tree.max_depth < 1:
        raise ValueError(f"tree.max_depth must be >= 1, got {tree.max_depth}")


@functools.lru_cache(maxsize=None)
def triton_importable() -> bool:
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:  # pragma: no cover - depends on the install
        return False
    return True


def check_full_mask_impl(impl: str, where: str = "full_mask_impl") -> str:
    if impl not in FULL_MASK_IMPLS:
        raise ValueError(f"{where} must be one of {FULL_MASK_IMPLS}, got {impl!r}")
    return impl


@functools.lru_cache(maxsize=None)
def default_full_mask_impl() -> str:
    """``$SGLANG_DDTREE_FULL_MASK_IMPL`` or ``DEFAULT_FULL_MASK_IMPL``; read once per process
    (``cache_clear()`` to re-read)."""
    value = os.environ.get(FULL_MASK_IMPL_ENV, "").strip() or DEFAULT_FULL_MASK_IMPL
    return check_full_mask_impl(value, FULL_MASK_IMPL_ENV)


def triton_interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.lru_cache(maxsize=None)
def _warn_fallback(op: str, why: str) -> None:
    logger.warning("sglang_ddtree.tree.%s: using the PyTorch path (%s)", op, why)


def use_triton(op: str, device: torch.device, backend: str) -> bool:
    """Choose the path. ``auto``: Triton on CUDA when importable, else PyTorch (CPU needs no warning)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "torch":
        return False
    if backend == "triton":
        if not triton_importable():
            raise RuntimeError(f"{op}: backend='triton' requested but Triton is not importable")
        if device.type != "cuda" and not triton_interpreting():
            raise ValueError(f"{op}: backend='triton' on {device} needs TRITON_INTERPRET=1")
        return True
    if device.type != "cuda":
        return False
    if not triton_importable():
        _warn_fallback(op, "Triton is not importable")
        return False
    return True


def num_warps_for(elements: int) -> int:
    """Warps for a one-program-per-request kernel over a tile of ``elements`` (at most 8: the builder
    can use up to 255 registers per thread, and 255 x 256 threads is what one SM holds)."""
    return 4 if elements <= 2048 else 8
