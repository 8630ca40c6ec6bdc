"""One categorical draw per row of a probability matrix, by inverse CDF: one program per row.

T > 0 rounds draw one token at every tree node (``worker.sampling.node_samples``): R = bs * N rows of the
full vocabulary. Pass 1 sums the row (Z, about 1 after filtering and renormalising, but float32 rounding
leaves it a little off); pass 2 walks the row's running sum to the first token where it exceeds u * Z, for
the row's uniform u in [0, 1). That token has p > 0 (the running sum grows there), and each token is drawn
with probability p / Z. Reads the row twice, writes one int64; no temporary of the row's size (what
``torch.multinomial`` allocates for its exponential trick), no host sync.
"""

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["vocab"])
def draw_rows_kernel(
    probs_ptr,  # [R, V] float32, non-negative rows
    uniform_ptr,  # [R] float32 in [0, 1)
    out_ptr,  # [R] int64 out: the drawn column
    vocab,  # V
    stride_row,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    base = probs_ptr + row * stride_row
    cols = tl.arange(0, BLOCK)
    total = 0.0
    for start in range(0, vocab, BLOCK):
        total += tl.sum(tl.load(base + start + cols, mask=start + cols < vocab, other=0.0), axis=0)
    target = tl.load(uniform_ptr + row) * total
    # Pass 2: the first column whose running sum exceeds target (``below`` = mass before the block, summed
    # as in pass 1). If rounding leaves target at or above every running sum, the last column with p > 0.
    below = 0.0
    found = -1
    last_positive = 0
    for start in range(0, vocab, BLOCK):
        if found < 0:
            p = tl.load(base + start + cols, mask=start + cols < vocab, other=0.0)
            run = below + tl.cumsum(p, axis=0)
            first = tl.min(tl.where((run > target) & (p > 0.0), cols, BLOCK), axis=0)
            if first < BLOCK:
                found = start + first
            last_positive = tl.maximum(last_positive, tl.max(tl.where(p > 0.0, start + cols, 0), axis=0))
            below += tl.sum(p, axis=0)
    if found < 0:
        found = last_positive
    tl.store(out_ptr + row, found.to(tl.int64))
