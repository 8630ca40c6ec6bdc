"""Fused DDTree builder: one program per request keeps each depth's frontier on chip.

Serves the build-tree step. Keys are int64: score code << 31 | (2**31 - 1 - candidate index), see
``_ordkey.py`` (larger = better; ties to the lower index). Phase 1: for depth 1..L-1, the sorted
top-``budget`` of (kept parents x top-K); the K candidate rows are already sorted runs, merged either
by log2(K) bitonic merge rounds in registers (MERGE=False; many cross-warp stages per depth) or by
log2(K) merge-path rounds through a small scratch (MERGE=True; per depth about log2(budget) + a few
dependent loads per thread and one barrier per round). The frontier keys go to a workspace. Phase 2:
the global top-``budget`` as a count per depth (binary search on the score code; ties to the lower
depth, then the lower slot). Phase 3: rows are depth-major in frontier order, written with no
cross-thread traffic. Both phase-1 variants produce identical keys, hence identical trees."""

import triton
import triton.language as tl

from sglang_ddtree.tree import _ordkey

# The key encoding of ``_ordkey`` (named there once, for both paths).
_INDEX_BITS = tl.constexpr(_ordkey.INDEX_BITS)  # 31: key = code << 31 | (2**31 - 1 - index)
_IDX_MASK = tl.constexpr(_ordkey.INDEX_MASK)  # 2**31 - 1
_SIGN = tl.constexpr(_ordkey.SIGN)  # 2**31: ord(+0.0), the largest code
_ROOT_KEY = tl.constexpr(_ordkey.ROOT_KEY)  # 2**62 = ord(+0.0) << 31: the root's key (score 0)
_NEG_ZERO_BITS = tl.constexpr(-_ordkey.SIGN)  # int32 bits of -0.0 (folded onto +0.0)
_EMPTY_CODE32 = tl.constexpr(-_ordkey.SIGN)  # code 0 (empty slot) as an int32 code - 2**31
_CODE_END = tl.constexpr(2 * _ordkey.SIGN)  # 2**32 > every code


@triton.jit
def _score_code(score):
    """float32 (<= 0) -> int64 order-preserving code; -0 folded onto +0 (see _ordkey.score_ord)."""
    bits = score.to(tl.int32, bitcast=True)
    bits = tl.where(bits == _NEG_ZERO_BITS, 0, bits).to(tl.int64)
    return tl.where(bits < 0, -1 - bits, bits + _SIGN)


@triton.jit
def _code_score(code):
    """Inverse of _score_code for valid codes (> 0)."""
    bits = tl.where(code >= _SIGN, code - _SIGN, -1 - code)
    return bits.to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _xor(a, b):
    return a ^ b


@triton.jit
def _bit(N_DIMS: tl.constexpr, P: tl.constexpr):
    """0/1 tensor broadcastable to a [2] * N_DIMS hypercube: bit P (0 = innermost) of the flat index."""
    return tl.reshape(tl.arange(0, 2), [1] * (N_DIMS - P - 1) + [2] + [1] * P)


@triton.jit
def _swap_with_partner(h, desc, P: tl.constexpr, N_DIMS: tl.constexpr):
    """One bitonic compare-exchange across bit P; blocks where ``desc`` is 1 end up descending."""
    partner = h ^ tl.reduce(h, N_DIMS - 1 - P, _xor, keep_dims=True)
    take = (partner > h) ^ (_bit(N_DIMS, P) == 1) ^ (desc == 0)
    return tl.where(take, partner, h)


@triton.jit
def _top_run_of_sorted_runs(x, LOG_RUN: tl.constexpr, LOG_RUNS: tl.constexpr):
    """Top 2**LOG_RUN values, descending, of 2**LOG_RUNS contiguous sorted runs of a 1-D int64 tensor.

    Run j must be ascending for even j and descending for odd j (a single run: descending). Each
    round halves the runs: the elementwise max of runs 2j and 2j+1 holds their top half as a bitonic
    run (half-cleaner), which LOG_RUN compare-exchange stages sort, alternating direction.
    """
    if LOG_RUN == 0:
        x = tl.zeros([1], dtype=tl.int64) + tl.max(x, axis=0)
    elif LOG_RUNS > 0:
        h = tl.reshape(x, [2] * (LOG_RUN + LOG_RUNS))
        for r in tl.static_range(LOG_RUNS):
            h = tl.max(h, axis=LOG_RUNS - 1 - r)  # the dim of index bit LOG_RUN
            if r == LOG_RUNS - 1:
                desc = tl.full([], 1, tl.int32)
            else:  # run parity: even runs ascending, odd descending
                desc = _bit(LOG_RUN + LOG_RUNS - r - 1, LOG_RUN)
            for q in tl.static_range(LOG_RUN):
                h = _swap_with_partner(h, desc, LOG_RUN - 1 - q, LOG_RUN + LOG_RUNS - r - 1)
        x = tl.reshape(h, [2**LOG_RUN])
    return x


@triton.jit
def _cand_key(par_row, lp_row, run, idx, d, k_eff, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr):
    """Key of candidate (parent slot ``idx``, rank ``run``) at depth ``d`` (tensors of one shape).

    Same key as the bitonic path: code << 31 | (2**31 - 1 - (idx * BLOCK_K + run)); a parent slot
    that is empty or a rank >= k_eff gives code 0; ``idx`` outside [0, BLOCK_B) gives -1 (below all).
    Depth 0's only parent is the root (key 2**62: code 2**31 = score +0) in slot 0.
    """
    inside = (idx >= 0) & (idx < BLOCK_B)
    p_key = tl.load(par_row + idx, mask=inside & (d > 0), other=0)
    p_key = tl.where((d == 0) & (idx == 0), _ROOT_KEY, p_key)
    lpk = tl.load(lp_row + run, mask=run < k_eff, other=0.0)
    lpk = tl.where(lpk != lpk, float("-inf"), tl.minimum(lpk, 0.0))  # NaN: an impossible draft, never above one
    p_code = p_key >> _INDEX_BITS
    cand = tl.where(p_code > 0, _code_score(p_code), float("-inf")) + lpk
    code = tl.where((p_code > 0) & (run < k_eff), _score_code(cand), 0)
    key = (code << _INDEX_BITS) | (_IDX_MASK - (idx * BLOCK_K + run).to(tl.int64))
    return tl.where(inside, key, -1)


@triton.jit
def _run_key(src, par_row, lp_row, run, idx, d, k_eff, FIRST: tl.constexpr, BLOCK_B: tl.constexpr,
             BLOCK_K: tl.constexpr):
    """Element ``idx`` of sorted run ``run``: a candidate run (FIRST round) or a merged run in ``src``."""
    if FIRST:
        key = _cand_key(par_row, lp_row, run, idx, d, k_eff, BLOCK_B, BLOCK_K)
    else:
        inside = (idx >= 0) & (idx < BLOCK_B)
        key = tl.load(src + run * BLOCK_B + idx, mask=inside, other=-1)
    return key


@triton.jit
def _merge_round(par_row, lp_row, scratch, out_row, d, k_eff, budget, R: tl.constexpr, M: tl.constexpr,
                 SEG: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr, LOG_B: tl.constexpr,
                 LOG_K: tl.constexpr, NUM_SEG: tl.constexpr):
    """Round R of :func:`_merge_frontier`: M pairwise merges, NUM_SEG segments of SEG outputs each."""
    seg = tl.arange(0, NUM_SEG)
    m = seg // (BLOCK_B // SEG)
    t0 = (seg % (BLOCK_B // SEG)) * SEG
    src = scratch + ((R + 1) % 2) * (BLOCK_K // 2) * BLOCK_B  # round R - 1's output
    run_a = 2 * m
    run_b = 2 * m + 1
    # co-rank: i = #A among the first t0 outputs = smallest i in [0, t0] with i == t0 or A[i] < B[t0-1-i]
    lo = t0 * 0
    hi = t0
    for _ in tl.static_range(LOG_B + 1):
        active = lo < hi
        mid = (lo + hi) // 2
        a = _run_key(src, par_row, lp_row, run_a, tl.where(active, mid, -1), d, k_eff, R == 0, BLOCK_B, BLOCK_K)
        bb = _run_key(src, par_row, lp_row, run_b, tl.where(active, t0 - 1 - mid, -1), d, k_eff, R == 0,
                      BLOCK_B, BLOCK_K)
        q = a < bb
        hi = tl.where(active & q, mid, hi)
        lo = tl.where(active & (q == 0), mid + 1, lo)
    i = lo
    j = t0 - lo
    for s in tl.static_range(SEG):
        a = _run_key(src, par_row, lp_row, run_a, i, d, k_eff, R == 0, BLOCK_B, BLOCK_K)
        bb = _run_key(src, par_row, lp_row, run_b, j, d, k_eff, R == 0, BLOCK_B, BLOCK_K)
        take_a = a >= bb  # never a tie between two valid keys (they are unique)
        out = tl.where(take_a, a, bb)
        if R == LOG_K - 1:
            t = t0 + s
            tl.store(out_row + t, tl.where(((out >> _INDEX_BITS) > 0) & (t < budget), out, 0))
        else:
            dst = scratch + (R % 2) * (BLOCK_K // 2) * BLOCK_B
            tl.store(dst + m * BLOCK_B + t0 + s, out)
        i += take_a.to(tl.int32)
        j += 1 - take_a.to(tl.int32)


@triton.jit
def _merge_frontier(par_row, lp_row, scratch, out_row, d, k_eff, budget,
                    BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr, LOG_B: tl.constexpr,
                    LOG_K: tl.constexpr, NUM_SEG: tl.constexpr):
    """Depth ``d``'s sorted top-BLOCK_B frontier by merge paths, written to ``out_row`` (0 = empty).

    The BLOCK_K candidate runs (rank k child of every parent slot; each already descending) are merged
    pairwise in LOG_K rounds, each keeping the top BLOCK_B of a pair (enough: the top-budget of a union
    lies in the union of the parts' top-budget). A round splits its outputs into segments of SEG
    consecutive positions; a segment finds its start in both runs by a binary search on the merge
    path (co-rank), then emits SEG outputs by plain compare-and-advance. Keys are unique (the
    candidate index), so the merge is exact; ties do not arise. Rounds alternate between the two
    halves of ``scratch`` ([2, BLOCK_K // 2, BLOCK_B]) and are separated by barriers.
    """
    if LOG_K == 0:
        slots = tl.arange(0, BLOCK_B)
        key = _cand_key(par_row, lp_row, slots * 0, slots, d, k_eff, BLOCK_B, BLOCK_K)
        tl.store(out_row + slots, tl.where(((key >> _INDEX_BITS) > 0) & (slots < budget), key, 0))
        tl.debug_barrier()
    for r in tl.static_range(LOG_K):
        _merge_round(par_row, lp_row, scratch, out_row, d, k_eff, budget, r, BLOCK_K >> (r + 1),
                     ((BLOCK_K >> (r + 1)) * BLOCK_B) // NUM_SEG, BLOCK_B, BLOCK_K, LOG_B, LOG_K, NUM_SEG)
        tl.debug_barrier()


@triton.jit(
    do_not_specialize=[
        "budget", "depth_limit", "k_eff", "num_rows",
        "stride_lp_b", "stride_lp_d", "stride_tok_b", "stride_tok_d",
    ]
)
def ddtree_build_kernel(
    lp_ptr,  # [bs, L-1, K] float32, top-K log-probs per position
    tok_ptr,  # [bs, L-1, K] int64, their token ids
    root_ptr,  # [bs] int64, root tokens (read only if HAS_ROOT)
    out_tok_ptr,  # [bs, N] int64
    out_par_ptr,  # [bs, N] int64
    out_dep_ptr,  # [bs, N] int64
    out_score_ptr,  # [bs, N] float32
    out_valid_ptr,  # [bs, N] bool
    out_num_ptr,  # [bs] int32
    key_ws_ptr,  # [bs, L-1, BLOCK_B] int64 workspace: sorted frontier keys per depth (0 = empty)
    merge_ws_ptr,  # [bs, 2, BLOCK_K // 2, BLOCK_B] int64 scratch of the merge rounds (if MERGE)
    budget,
    depth_limit,  # L - 1
    k_eff,  # min(K, budget)
    num_rows,  # N = budget + 1
    stride_lp_b,
    stride_lp_d,
    stride_tok_b,
    stride_tok_d,
    HAS_ROOT: tl.constexpr,
    BLOCK_B: tl.constexpr,  # next_pow2(budget)
    BLOCK_K: tl.constexpr,  # next_pow2(k_eff)
    BLOCK_D: tl.constexpr,  # next_pow2(L-1)
    BLOCK_P: tl.constexpr,  # rows per pad-fill chunk
    LOG_B: tl.constexpr,  # log2(BLOCK_B)
    LOG_K: tl.constexpr,  # log2(BLOCK_K)
    MERGE: tl.constexpr,  # phase 1 by merge paths through the scratch (else bitonic, in registers)
    NUM_SEG: tl.constexpr,  # merge segments per round (about one per thread; <= BLOCK_B)
):
    b = tl.program_id(0).to(tl.int64)
    slots = tl.arange(0, BLOCK_B)
    ks = tl.arange(0, BLOCK_K)
    ds = tl.arange(0, BLOCK_D)
    key_ws = key_ws_ptr + b * depth_limit * BLOCK_B

    # ---- phase 1: per-depth sorted top-budget frontier --------------------------------------------
    if MERGE:
        merge_ws = merge_ws_ptr + b * BLOCK_K * BLOCK_B
        lp_base = lp_ptr + b * stride_lp_b
        for d in range(depth_limit):
            par_row = key_ws + (d - 1) * BLOCK_B  # not read at d = 0
            _merge_frontier(par_row, lp_base + d * stride_lp_d, merge_ws, key_ws + d * BLOCK_B, d, k_eff,
                            budget, BLOCK_B, BLOCK_K, LOG_B, LOG_K, NUM_SEG)  # ends in a barrier
    else:
        # Candidate tile [BLOCK_K, BLOCK_B]: row k = rank-k child of every frontier slot. Rows are sorted
        # runs already (the frontier is sorted), laid out ascending/descending alternately for the merge.
        ks_col = ks[:, None]
        cols = slots[None, :]
        if LOG_K > 0:
            flip_row = (ks_col % 2) == 0
        else:
            flip_row = ks_col < 0
        pslot_tile = tl.where(flip_row, BLOCK_B - 1 - cols, cols)
        cand_idx = (pslot_tile * BLOCK_K + ks_col).to(tl.int64)
        for d in range(depth_limit):
            lp = tl.load(lp_ptr + b * stride_lp_b + d * stride_lp_d + ks, mask=ks < k_eff, other=0.0)
            lp = tl.where(lp != lp, float("-inf"), tl.minimum(lp, 0.0))  # NaN (a drafter's NaN logits): -inf
            # Parent keys straight into the tile layout (odd rows reversed) from the previous depth's
            # workspace row: no in-register reversal. Depth 0: the root, key 2**62 (code 2**31 = +0).
            if d == 0:
                p_key = tl.where(pslot_tile == 0, _ROOT_KEY, 0).to(tl.int64)
            else:
                p_key = tl.load(key_ws + (d - 1) * BLOCK_B + pslot_tile)
            p_code = p_key >> _INDEX_BITS
            ok = (p_code > 0) & (ks < k_eff)[:, None]
            cand = tl.where(p_code > 0, _code_score(p_code), float("-inf")) + lp[:, None]  # [BLOCK_K, BLOCK_B]
            code = tl.where(ok, _score_code(cand), 0)
            key = (code << _INDEX_BITS) | (_IDX_MASK - cand_idx)
            top = _top_run_of_sorted_runs(tl.reshape(key, [BLOCK_B * BLOCK_K]), LOG_B, LOG_K)
            f_key = tl.where(((top >> _INDEX_BITS) > 0) & (slots < budget), top, 0)  # [BLOCK_B] descending
            tl.store(key_ws + d * BLOCK_B + slots, f_key)
            tl.debug_barrier()  # the next depth (and phase 2) reads this row in another layout

    # ---- phase 2: how many leading slots of each depth are in the global top-budget ---------------
    # Codes as int32 (code - 2**31; -2**31 = empty) to halve the registers of the [BLOCK_D, BLOCK_B] tile.
    gkeys = tl.load(
        key_ws + ds[:, None] * BLOCK_B + slots[None, :], mask=(ds < depth_limit)[:, None], other=0
    )
    gcode = ((gkeys >> _INDEX_BITS) - _SIGN).to(tl.int32)  # [BLOCK_D, BLOCK_B]
    lo = tl.full([], 1, tl.int64)  # search the code T with count(code >= T) >= budget > count(> T)
    hi = tl.full([], _CODE_END, tl.int64)
    for _ in range(32):
        mid = (lo + hi) // 2
        cnt = tl.sum(tl.sum((gcode >= (mid - _SIGN).to(tl.int32)).to(tl.int32), axis=1), axis=0)
        take_upper = cnt >= budget
        lo = tl.where(take_upper, mid, lo)
        hi = tl.where(take_upper, hi, mid)
    thr = (lo - _SIGN).to(tl.int32)
    gt = tl.sum((gcode > thr).to(tl.int32), axis=1)  # [BLOCK_D]
    eq = tl.sum((gcode == thr).to(tl.int32), axis=1)
    nvalid = tl.sum((gcode > _EMPTY_CODE32).to(tl.int32), axis=1)
    rest = budget - tl.sum(gt, axis=0)  # > 0: ties at `thr` fill it, lower depth first
    take = tl.minimum(tl.maximum(rest - (tl.cumsum(eq, axis=0) - eq), 0), eq)
    n_sel = tl.minimum(gt + take, nvalid)  # [BLOCK_D] int32

    # ---- phase 3: rows = depth-major, each depth's kept slots in order ----------------------------
    # Row of slot i at depth d: base + i, base = 1 + n[0] + ... + n[d-1]; its parent is slot pslot
    # one depth up, i.e. row base_prev + pslot (the root, row 0, at depth 1). No cross-thread traffic.
    out_tok = out_tok_ptr + b * num_rows
    out_par = out_par_ptr + b * num_rows
    out_dep = out_dep_ptr + b * num_rows
    out_score = out_score_ptr + b * num_rows
    out_valid = out_valid_ptr + b * num_rows
    if HAS_ROOT:
        root_tok = tl.load(root_ptr + b)
    else:
        root_tok = tl.zeros([], dtype=tl.int64)
    tl.store(out_tok, root_tok)
    tl.store(out_par, -1)
    tl.store(out_dep, 0)
    tl.store(out_score, 0.0)
    tl.store(out_valid, root_tok == root_tok)
    base_prev = tl.zeros([], dtype=tl.int64)
    base = tl.full([], 1, tl.int64)
    for d in range(depth_limit):
        n_cur = tl.sum(tl.where(ds == d, n_sel, 0), axis=0).to(tl.int64)
        keys = tl.load(key_ws + d * BLOCK_B + slots)
        sel = slots < n_cur
        c = _IDX_MASK - (keys & _IDX_MASK)
        rank = c % BLOCK_K
        row = base + slots
        prow = tl.where(d == 0, 0, base_prev + c // BLOCK_K)
        tok = tl.load(tok_ptr + b * stride_tok_b + d * stride_tok_d + rank, mask=sel, other=0)
        tl.store(out_tok + row, tok, mask=sel)
        tl.store(out_par + row, prow, mask=sel)
        tl.store(out_dep + row, tl.zeros([BLOCK_B], dtype=tl.int64) + (d + 1), mask=sel)
        tl.store(out_score + row, _code_score(keys >> _INDEX_BITS), mask=sel)
        tl.store(out_valid + row, sel, mask=sel)
        base_prev = base
        base = base + n_cur
    total = base

    # ---- pads: rows >= 1 + #nodes ------------------------------------------------------------------
    for r0 in range(0, num_rows, BLOCK_P):
        rows = r0 + tl.arange(0, BLOCK_P)
        pad = (rows >= total) & (rows < num_rows)
        tl.store(out_tok + rows, tl.zeros([BLOCK_P], dtype=tl.int64), mask=pad)
        tl.store(out_par + rows, tl.full([BLOCK_P], -1, tl.int64), mask=pad)
        tl.store(out_dep + rows, tl.zeros([BLOCK_P], dtype=tl.int64), mask=pad)
        tl.store(out_score + rows, tl.full([BLOCK_P], float("-inf"), tl.float32), mask=pad)
        tl.store(out_valid + rows, rows < 0, mask=pad)
    tl.store(out_num_ptr + b, total.to(tl.int32))
