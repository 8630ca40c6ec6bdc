"""Exact, sortable integer keys for float32 tree scores (shared by the PyTorch path and tests).

Serves the build-tree step. A score ``s <= 0`` maps to ``ord(s)`` in ``[0x007FFFFF, 2**31]`` (``-inf`` the
smallest, ``+0`` the largest; ``-0`` is folded onto ``+0``); 0 marks an invalid slot. A selection key is
``ord(s) << 31 | (2**31 - 1 - index)``: larger key = higher score, ties to the lower index. It is the
same encoding the Triton kernel uses, so both paths break ties identically.
"""

from __future__ import annotations

import torch

INDEX_BITS = 31  # low bits of a key: the candidate index (complemented)
INDEX_MASK = (1 << INDEX_BITS) - 1  # 2**31 - 1
SIGN = 1 << 31  # 2**31: the float32 sign bit (int32 bits -2**31 are -0.0); also ord(+0.0), the largest code
ROOT_KEY = SIGN << INDEX_BITS  # 2**62: key with code ord(+0.0), the root's score 0 (its index bits are unused)


def score_ord(score: torch.Tensor) -> torch.Tensor:
    """float32 ``[...]`` (values <= 0) -> int64 ``[...]`` order-preserving code, ``-0`` == ``+0``."""
    bits = score.contiguous().view(torch.int32).to(torch.int64)
    bits = torch.where(bits == -SIGN, torch.zeros_like(bits), bits)  # -0.0 -> +0.0
    return torch.where(bits < 0, -1 - bits, bits + SIGN)


def ord_score(code: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`score_ord` for valid codes (> 0): int64 ``[...]`` -> float32 ``[...]``."""
    bits = torch.where(code >= SIGN, code - SIGN, -1 - code)
    return bits.to(torch.int32).view(torch.float32)


def make_key(code: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """int64 key: higher ``code`` first, then lower ``index`` (``index < 2**31``)."""
    return (code << INDEX_BITS) | (INDEX_MASK - index)


def key_code(key: torch.Tensor) -> torch.Tensor:
    return key >> INDEX_BITS


def key_index(key: torch.Tensor) -> torch.Tensor:
    return INDEX_MASK - (key & INDEX_MASK)
