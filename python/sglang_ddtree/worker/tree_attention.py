"""The tree part of DDTREE's target verify attention, merged into the prefix part (fa3 backend, VERIFY step).

Each tree row attends to its request's committed prefix and to its ancestors among the N = budget + 1 tree
rows, itself included. FlashAttention computes the prefix part (o_prefix and its LSE); ``ancestor_bits``
packs each row's ancestor set once per round and ``tree_attention_merge`` adds the tree part to every layer's
prefix output in one launch (``kernels/tree_attention.py`` on CUDA; the PyTorch references here elsewhere).
Softcap and sliding windows are not supported: the caller keeps upstream's path for them.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from sglang_ddtree.tree._common import bit_words_out, cdiv, check, next_pow2, triton_interpreting, use_triton
from sglang_ddtree.tree.reference import tree_bits_torch

__all__ = ["MergeLaunch", "merge_launch", "sm_count", "ancestor_bits", "ancestor_bits_torch", "tree_attention_merge",
           "tree_attention_merge_torch"]

BITS_PER_WORD = 32
_ANC_BLOCK_R = 16
_BLOCK_N = 64  # keys per tile of the merge kernel (a multiple of BITS_PER_WORD)
_ROWS_PER_PROGRAM = 64  # query rows (tree rows x heads) per program of the merge kernel
_MAX_HEADS_PER_PROGRAM = 16
# The verify's launch rule (``merge_launch``): 32 keys a tile, and 64 query rows a program while that grid fills
# at least _FILL of the GPU's SMs, else 16 (four times the programs). Session 29, H200 (132 SMs), Qwen3-8B heads
# (32 / 8, D 128), budgets 15 / 63 x batch 1 / 8 / 16 / 32 / 64: the rule picked the fastest of nine launches at
# all ten shapes, 1.1-1.6x faster than the old 64 x 64 at budget 15 (``session29/tree_attention.json``).
_FILL = 0.75


@dataclasses.dataclass(frozen=True)
class MergeLaunch:
    """A launch configuration of the merge kernel; the default is what the verify runs. ``block_n``: keys per tile
    (a power of two, a multiple of 32: at N = 16 tree rows the default 64 masks three quarters of its tile);
    ``rows_per_program``: query rows (tree rows x heads) per program, a power of two >= 16 (``tl.dot``'s least M);
    ``max_heads``: query heads of one KV head per program, a power of two; ``num_warps``: 0 = 8 from head dim 256,
    else 4. ``benchmark/bench_tree_attention.py`` times others against it (results identical up to float
    rounding: the same math over other tiles)."""

    block_n: int = _BLOCK_N
    rows_per_program: int = _ROWS_PER_PROGRAM
    max_heads: int = _MAX_HEADS_PER_PROGRAM
    num_warps: int = 0

    def __post_init__(self):
        pow2 = lambda x: isinstance(x, int) and x >= 1 and not x & (x - 1)  # noqa: E731
        if not (pow2(self.block_n) and self.block_n % BITS_PER_WORD == 0 and self.block_n <= 256):
            raise ValueError(f"block_n must be a power of two in [32, 256], got {self.block_n}")
        if not (pow2(self.rows_per_program) and 16 <= self.rows_per_program <= 256):
            raise ValueError(f"rows_per_program must be a power of two in [16, 256], got {self.rows_per_program}")
        if not (pow2(self.max_heads) and self.max_heads <= self.rows_per_program):
            raise ValueError(f"max_heads must be a power of two <= rows_per_program ({self.rows_per_program}), got "
                             f"{self.max_heads}")
        if self.num_warps not in (0, 1, 2, 4, 8, 16):
            raise ValueError(f"num_warps must be one of 0 (default), 1, 2, 4, 8, 16, got {self.num_warps}")


DEFAULT_MERGE_LAUNCH = MergeLaunch()  # until session 29 the verify's launch at every shape


def sm_count(device: torch.device) -> int:
    """The GPU's SM count (torch caches the properties); under the Triton interpreter (CPU tests) the H200's 132,
    the GPU ``merge_launch`` was fitted on."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 132


def merge_launch(num_rows: int, batch_size: int, kv_heads: int, group: int, num_sms: int) -> MergeLaunch:
    """The verify's launch of the merge for a shape (``_FILL``): 32 keys a tile (at N = 16 tree rows 64 masks
    three quarters of each tile), and 64 query rows a program where the grid at 64 fills >= ``_FILL`` of
    ``num_sms``, else 16 (small batches: more, smaller programs)."""
    gb = min(next_pow2(group), _MAX_HEADS_PER_PROGRAM)
    programs = cdiv(num_rows, _ROWS_PER_PROGRAM // gb) * batch_size * kv_heads * cdiv(group, gb)
    rows = _ROWS_PER_PROGRAM if programs >= _FILL * num_sms else 16
    return MergeLaunch(block_n=32, rows_per_program=rows)


def num_words(num_rows: int) -> int:
    """NW: int32 words per row of the packed ancestor mask."""
    return cdiv(num_rows, BITS_PER_WORD)


def _check_parents(parents: torch.Tensor, max_depth: int) -> None:
    if not isinstance(parents, torch.Tensor) or parents.dim() != 2:
        raise ValueError(f"parents must be a [bs, N] tensor, got {getattr(parents, 'shape', type(parents))}")
    if parents.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"parents must be int32 or int64, got {parents.dtype}")
    if max_depth < 0:
        raise ValueError(f"max_depth must be >= 0, got {max_depth}")


def _bits_out(out: Optional[torch.Tensor], rows: int, nw: int, device: torch.device) -> torch.Tensor:
    if out is None:
        return torch.empty((rows, nw), dtype=torch.int32, device=device)
    return bit_words_out(out, "out", rows, nw, device)


def ancestor_bits_torch(parents: torch.Tensor, max_depth: int, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """PyTorch reference of :func:`ancestor_bits` (same arguments, same bytes)."""
    _check_parents(parents, max_depth)
    bs, n = parents.shape
    dev = parents.device
    nw = num_words(n)
    res = _bits_out(out, bs * n, nw, dev)
    par = parents.to(torch.int64)
    seen = torch.zeros((bs, n, nw * BITS_PER_WORD), dtype=torch.bool, device=dev)
    cur = torch.arange(n, device=dev).expand(bs, n)
    for _ in range(max_depth + 1):
        live = cur >= 0
        safe = cur.clamp(min=0)
        seen.scatter_(2, safe.unsqueeze(2), live.unsqueeze(2) | seen.gather(2, safe.unsqueeze(2)))
        cur = torch.where(live, par.gather(1, safe), -1)
    res.copy_(tree_bits_torch(seen[..., :n]))
    return res


def ancestor_bits(
    parents: torch.Tensor, max_depth: int, out: Optional[torch.Tensor] = None, *, backend: str = "auto"
) -> torch.Tensor:
    """Each tree row's ancestor set, packed: bit j % 32 of word j // 32 of row b*N + i is set iff tree row j
    of request b is i itself or one of its ancestors (at most ``max_depth`` parent hops; -1 stops).

    Shape: parents [bs, N] int32/int64 (parent row < child row; -1 for the root and pads, which get only
    their own bit) -> [bs*N, NW] int32, NW = cdiv(N, 32), bits past N zero. ``out``: optional [>= bs*N, NW]
    int32 buffer (unit column stride, e.g. a CUDA-graph buffer); exactly its first bs*N rows are written and
    returned. One launch, no host sync. ``backend``: auto | triton | torch.
    """
    _check_parents(parents, max_depth)
    if not use_triton("ancestor_bits", parents.device, backend):
        return ancestor_bits_torch(parents, max_depth, out)
    from sglang_ddtree.worker.kernels.tree_attention import ancestor_bits_kernel

    bs, n = parents.shape
    nw = num_words(n)
    res = _bits_out(out, bs * n, nw, parents.device)
    if bs == 0 or n == 0:
        return res
    parents = parents if parents.stride(1) == 1 else parents.contiguous()
    ancestor_bits_kernel[(bs, cdiv(n, _ANC_BLOCK_R))](
        parents, parents.stride(0), res, res.stride(0), n, nw, max_depth,
        BLOCK_R=_ANC_BLOCK_R, BLOCK_W=next_pow2(nw), num_warps=4,
    )
    return res


def _unpack_bits(tree_bits: torch.Tensor, num_rows: int) -> torch.Tensor:
    """[T, NW] int32 -> [T, N] bool."""
    shifts = torch.arange(BITS_PER_WORD, dtype=torch.int32, device=tree_bits.device)
    bits = (tree_bits.unsqueeze(-1) >> shifts) & 1
    return bits.reshape(tree_bits.shape[0], -1)[:, :num_rows] != 0


def _check_merge(q, k, v, tree_bits, o_prefix, lse_prefix, num_rows, out) -> None:
    dev = q.device
    if q.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"q must be bfloat16, float16 or float32, got {q.dtype}")
    check(q, "q", q.dtype, 3, dev)
    t, hq, d = q.shape
    if num_rows < 1 or t % num_rows:
        raise ValueError(f"q has {t} rows, not a multiple of num_rows={num_rows}")
    if d & (d - 1) or not 16 <= d <= 256:
        raise ValueError(f"head_dim must be a power of two in [16, 256], got {d}")
    for name, x in (("k", k), ("v", v)):
        check(x, name, q.dtype, 3, dev)
    hkv = k.shape[1]
    if k.shape != (t, hkv, d) or v.shape != (t, hkv, d) or hq % hkv:
        raise ValueError(f"k, v must be [{t}, Hkv, {d}] with Hq={hq} % Hkv == 0, got {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    check(tree_bits, "tree_bits", torch.int32, 2, dev)
    if tree_bits.shape != (t, num_words(num_rows)) or tree_bits.stride(1) != 1:
        raise ValueError(f"tree_bits must be [{t}, {num_words(num_rows)}] int32 with unit column stride, "
                         f"got {tuple(tree_bits.shape)}")
    check(o_prefix, "o_prefix", o_prefix.dtype, 3, dev)
    check(lse_prefix, "lse_prefix", torch.float32, 2, dev)
    if o_prefix.shape != q.shape or lse_prefix.shape != (hq, t):
        raise ValueError(f"o_prefix must be {tuple(q.shape)} and lse_prefix [Hq={hq}, T={t}] (a [T, Hq] "
                         f"tensor goes in as .t()), got {tuple(o_prefix.shape)}, {tuple(lse_prefix.shape)}")
    if out is not None:
        check(out, "out", q.dtype, 3, dev)
        if out.shape != q.shape:
            raise ValueError(f"out must be {tuple(q.shape)}, got {tuple(out.shape)}")
    for name, x in (("q", q), ("k", k), ("v", v), ("o_prefix", o_prefix), ("out", out)):
        if x is not None and x.stride(2) != 1:
            raise ValueError(f"{name} must have a contiguous last dim, got strides {x.stride()}")


def tree_attention_merge_torch(q, k, v, tree_bits, o_prefix, lse_prefix, *, num_rows: int, sm_scale: float,
                               out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """PyTorch reference of :func:`tree_attention_merge` (float32 math; same arguments)."""
    t, hq, d = q.shape
    bs, n, hkv = t // num_rows, num_rows, k.shape[1]
    f = lambda x: x.float().reshape(bs, n, x.shape[1], d).transpose(1, 2)  # [bs, H, N, D]
    kk = f(k).repeat_interleave(hq // hkv, dim=1)
    vv = f(v).repeat_interleave(hq // hkv, dim=1)
    eye = torch.eye(n, dtype=torch.bool, device=q.device)
    lower = torch.ones((n, n), dtype=torch.bool, device=q.device).tril()
    visible = (_unpack_bits(tree_bits, n).view(bs, 1, n, n) | eye) & lower  # ancestors only: j <= i
    s = torch.matmul(f(q), kk.transpose(-1, -2)) * sm_scale
    s = s.masked_fill(~visible, float("-inf"))
    lse_t = torch.logsumexp(s, dim=-1)  # [bs, Hq, N]
    o_t = torch.matmul(torch.softmax(s, dim=-1), vv)
    lse_p = lse_prefix.float().view(hq, bs, n).permute(1, 0, 2)
    big = torch.maximum(lse_p, lse_t)
    w_p, w_t = torch.exp(lse_p - big).unsqueeze(-1), torch.exp(lse_t - big).unsqueeze(-1)
    merged = (w_p * f(o_prefix) + w_t * o_t) / (w_p + w_t)
    merged = merged.transpose(1, 2).reshape(t, hq, d).to(q.dtype)
    if out is None:
        return merged
    out.copy_(merged)
    return out


def _dot_f32(dtype: torch.dtype) -> bool:
    """Float32 dots for fp32 inputs, and for bf16 under the Triton interpreter, whose ``tl.dot`` multiplies
    bf16 tiles as their uint16 bit patterns (Triton 3.x keeps bf16 as uint16 in NumPy); fp16 dots work there."""
    return dtype == torch.float32 or (dtype == torch.bfloat16 and triton_interpreting())


def tree_attention_merge(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tree_bits: torch.Tensor, o_prefix: torch.Tensor,
    lse_prefix: torch.Tensor, *, num_rows: int, sm_scale: float, out: Optional[torch.Tensor] = None,
    backend: str = "auto", launch: Optional[MergeLaunch] = None,
) -> torch.Tensor:
    """Attention of every tree row over its prefix and its ancestors, from the prefix part alone.

    Shape: q [T, Hq, D] bf16/fp16/fp32, T = bs * N (row b*N + i), N = ``num_rows``; k, v [T, Hkv, D] the tree
    rows' keys and values, q's dtype, Hq % Hkv == 0 (q head h reads kv head h // (Hq // Hkv)); tree_bits
    [T, NW] int32 from :func:`ancestor_bits` (row i always sees itself; bits of keys j > i are ignored);
    o_prefix [T, Hq, D] the normalised attention over the prefix; lse_prefix [Hq, T] float32 natural-log
    LSE of the scaled prefix scores (FlashAttention-3's layout; any strides, so a [T, Hq] tensor goes in as
    ``.t()``), -inf for an empty prefix. D a power of two in [16, 256]; last dims contiguous, other strides
    free. Returns ``out`` ([T, Hq, D], q's dtype; allocated when None, may be ``o_prefix`` itself): the
    softmax over [prefix, visible tree keys] times their values, i.e. the two parts merged by their LSEs.
    Float32 accumulation. No host sync; with ``out`` given nothing is allocated (CUDA-graph capturable).
    ``backend``: auto | triton | torch. ``launch``: the Triton kernel's tiles and warps (``MergeLaunch``; None:
    :func:`merge_launch` for this shape and GPU, what the verify runs).
    """
    _check_merge(q, k, v, tree_bits, o_prefix, lse_prefix, num_rows, out)
    if not use_triton("tree_attention_merge", q.device, backend):
        return tree_attention_merge_torch(q, k, v, tree_bits, o_prefix, lse_prefix, num_rows=num_rows,
                                          sm_scale=sm_scale, out=out)
    from sglang_ddtree.worker.kernels.tree_attention import tree_attention_merge_kernel

    if out is None:
        out = torch.empty_like(q)
    t, hq, d = q.shape
    if t == 0:
        return out
    bs, hkv = t // num_rows, k.shape[1]
    group = hq // hkv
    if launch is None:
        launch = merge_launch(num_rows, bs, hkv, group, sm_count(q.device))
    gb = min(next_pow2(group), launch.max_heads)
    block_m = launch.rows_per_program // gb
    groups_per_kv = cdiv(group, gb)
    grid = (cdiv(num_rows, block_m), bs, hkv * groups_per_kv)
    tree_attention_merge_kernel[grid](
        q, k, v, tree_bits, o_prefix, lse_prefix, out,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), tree_bits.stride(0),
        o_prefix.stride(0), o_prefix.stride(1), lse_prefix.stride(0), lse_prefix.stride(1),
        out.stride(0), out.stride(1),
        num_rows, num_words(num_rows), group, groups_per_kv, float(sm_scale),
        HEAD_DIM=d, GB=gb, BLOCK_M=block_m, BLOCK_N=launch.block_n, DOT_F32=_dot_f32(q.dtype),
        num_warps=launch.num_warps or (8 if d >= 256 else 4),
    )
    return out
