"""``build_tree``: the budget best prefixes of a DFlash draft block, batched, exact, host-sync free.

Serves the build-tree step (draft -> BUILD TREE -> verify -> accept -> commit). On CUDA it launches the
fused Triton kernel (``kernels/build_tree.py``), elsewhere it runs the PyTorch formulation
(``reference.build_tree_torch``); both return exactly the node set and row order of the paper's heap.
"""

from __future__ import annotations

from typing import Optional

import torch

from sglang_ddtree.tree._common import check, next_pow2, num_warps_for_tile, use_triton
from sglang_ddtree.tree.metadata import Tree
from sglang_ddtree.tree.reference import build_tree_torch

# Phase 1 of the fused builder per budget class: "bitonic" (in registers, per-depth bitonic merges;
# fine while the frontier is small) or "merge" (merge paths through an L1-resident scratch; far fewer
# steps and barriers per depth at large budgets). Both give identical trees; see kernels/build_tree.py.
MERGE_MIN_BLOCK_B = 256
STRATEGIES = ("auto", "bitonic", "merge")


def _check_inputs(top_log_probs, top_token_ids, budget, root_token_ids) -> None:
    if not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budget must be an int >= 1, got {budget!r}")
    dev = top_log_probs.device
    check(top_log_probs, "top_log_probs", torch.float32, 3, dev)
    check(top_token_ids, "top_token_ids", torch.int64, 3, dev)
    if top_token_ids.shape != top_log_probs.shape:
        raise ValueError(
            f"top_token_ids {tuple(top_token_ids.shape)} != top_log_probs {tuple(top_log_probs.shape)}"
        )
    if top_log_probs.shape[1] < 1 or top_log_probs.shape[2] < 1:
        raise ValueError(f"need L-1 >= 1 and K >= 1, got shape {tuple(top_log_probs.shape)}")
    if root_token_ids is not None:
        check(root_token_ids, "root_token_ids", torch.int64, 1, dev)
        if root_token_ids.shape[0] != top_log_probs.shape[0]:
            raise ValueError("root_token_ids must have one entry per request")


def build_tree(
    top_log_probs: torch.Tensor,
    top_token_ids: torch.Tensor,
    budget: int,
    root_token_ids: Optional[torch.Tensor] = None,
    *,
    backend: str = "auto",
) -> Tree:
    """Build every request's draft tree: the ``budget`` highest-scoring prefixes.

    Shape: top_log_probs [bs, L-1, K] float32 (log-probs of each position's top-K tokens, each row
    sorted descending; values above 0 count as 0, NaN as -inf), top_token_ids [bs, L-1, K] int64, root_token_ids
    [bs] int64 or None (then row 0 holds 0 and the caller fills it) -> Tree with N = budget + 1 rows.
    Node order, tie-breaking and pad values: see ``sglang_ddtree.tree``. ``backend``: "auto" (Triton on
    CUDA, PyTorch elsewhere), "triton" or "torch". No host sync; CUDA-graph safe.
    """
    _check_inputs(top_log_probs, top_token_ids, budget, root_token_ids)
    if use_triton("build_tree", top_log_probs.device, backend):
        return build_tree_triton(top_log_probs, top_token_ids, budget, root_token_ids)
    return build_tree_torch(top_log_probs, top_token_ids, budget, root_token_ids)


def build_tree_triton(
    top_log_probs: torch.Tensor,
    top_token_ids: torch.Tensor,
    budget: int,
    root_token_ids: Optional[torch.Tensor] = None,
    strategy: str = "auto",
) -> Tree:
    """The fused-kernel path of :func:`build_tree` (inputs already checked).

    ``strategy``: phase 1 of the kernel, "bitonic", "merge" or "auto" (merge from a budget class of
    ``MERGE_MIN_BLOCK_B`` up); tests and the benchmark pin it, results are identical.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    from sglang_ddtree.tree.kernels.build_tree import ddtree_build_kernel

    bs, depth_limit, k_all = top_log_probs.shape
    dev = top_log_probs.device
    n = budget + 1
    k_eff = min(k_all, budget)
    block_b, block_k = next_pow2(budget), next_pow2(k_eff)
    merge = strategy == "merge" or (strategy == "auto" and block_b >= MERGE_MIN_BLOCK_B)
    lp = top_log_probs if top_log_probs.stride(2) == 1 else top_log_probs.contiguous()
    ids = top_token_ids if top_token_ids.stride(2) == 1 else top_token_ids.contiguous()
    tree = Tree(
        token_ids=torch.empty(bs, n, dtype=torch.int64, device=dev),
        parents=torch.empty(bs, n, dtype=torch.int64, device=dev),
        depths=torch.empty(bs, n, dtype=torch.int64, device=dev),
        scores=torch.empty(bs, n, dtype=torch.float32, device=dev),
        valid=torch.empty(bs, n, dtype=torch.bool, device=dev),
        num_nodes=torch.empty(bs, dtype=torch.int32, device=dev),
        max_depth=depth_limit,
    )
    if bs == 0:
        return tree
    key_ws = torch.empty(bs, depth_limit, block_b, dtype=torch.int64, device=dev)
    merge_ws = torch.empty(bs, block_k * block_b if merge else 1, dtype=torch.int64, device=dev)
    # merge rounds from MERGE_MIN_BLOCK_B: 8 warps (about one merge segment per thread); else by tile size
    num_warps = 8 if merge and block_b >= MERGE_MIN_BLOCK_B else num_warps_for_tile(block_b * block_k)
    ddtree_build_kernel[(bs,)](
        lp,
        ids,
        root_token_ids if root_token_ids is not None else tree.token_ids,
        tree.token_ids,
        tree.parents,
        tree.depths,
        tree.scores,
        tree.valid,
        tree.num_nodes,
        key_ws,
        merge_ws,
        budget,
        depth_limit,
        k_eff,
        n,
        lp.stride(0),
        lp.stride(1),
        ids.stride(0),
        ids.stride(1),
        HAS_ROOT=root_token_ids is not None,
        BLOCK_B=block_b,
        BLOCK_K=block_k,
        BLOCK_D=next_pow2(depth_limit),
        BLOCK_P=min(1024, 2 * block_b),  # >= N; one value per BLOCK_B (fewer compiles)
        LOG_B=block_b.bit_length() - 1,
        LOG_K=block_k.bit_length() - 1,
        MERGE=merge,
        NUM_SEG=min(32 * num_warps, block_b),  # about one merge segment per thread
        num_warps=num_warps,  # <= 8: 255 regs x 256 threads fit an SM
    )
    return tree
