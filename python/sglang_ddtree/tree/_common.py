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


def bit_words_out(out: torch.Tensor, name: str, rows: int, nw: int, device: torch.device) -> torch.Tensor:
    """A caller's buffer for ``rows`` rows of ``nw`` packed 32-column bit words ([>= rows, nw] int32, unit column
    stride, e.g. a CUDA-graph buffer): its first ``rows`` rows."""
    check(out, name, torch.int32, 2, device)
    if out.shape[0] < rows or out.shape[1] != nw or out.stride(1) != 1:
        raise ValueError(f"{name} must be [>= {rows}, {nw}] int32 with unit column stride, got {tuple(out.shape)} "
                         f"with strides {out.stride()}")
    return out[:rows]


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
        if t is None and name == "scores":  # a chain-shaped round's tree carries no scores (Tree.scores)
            continue
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


def triton_interpreting() -> bool:
    """TRITON_INTERPRET is set (Triton kernels run on CPU tensors): the package's only environment read."""
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


# Launch sizes, one rule per kernel family (at most 8 warps: the builder can use up to 255 registers per
# thread, and 255 x 256 threads is what one SM holds).


def num_warps_for_tile(elements: int) -> int:
    """Warps of the build kernel (one program per request over a register tile of ``elements``,
    BLOCK_B x BLOCK_K): 4 up to 2048 elements, else 8."""
    return 4 if elements <= 2048 else 8


def num_warps_for_rows(num_rows: int) -> int:
    """Warps of the greedy-walk kernels (one program per request holding all N = ``num_rows`` rows of its
    tree in registers: ``kernels/accept.ddtree_accept_kernel`` and the worker's fused accept + commit
    kernel): 4 up to 1024 rows, else 8."""
    return 4 if num_rows <= 1024 else 8


# Warps of the topology kernel: a grid of (request, 16-row block) programs over [16, 128] column tiles,
# so the per-program work does not grow with N.
TOPOLOGY_NUM_WARPS = 4
