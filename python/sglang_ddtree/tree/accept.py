"""``accept_greedy``: accept length, accepted rows and bonus token of every request, no host sync.

Serves the accept step (draft -> build tree -> verify -> ACCEPT -> commit). Same semantics as upstream
``verify_tree_greedy`` (walk from the root; at each node take the child whose token equals the target's
token there; stop at the first miss). Triton on CUDA (``kernels/accept.py``), PyTorch elsewhere.
"""

from __future__ import annotations

import torch

from sglang_ddtree.tree._common import check_tree, next_pow2, num_warps_for_rows, use_triton
from sglang_ddtree.tree.metadata import AcceptResult, Tree
from sglang_ddtree.tree.reference import accept_greedy_torch


def accept_greedy(tree: Tree, target_tokens: torch.Tensor, *, backend: str = "auto") -> AcceptResult:
    """Greedy acceptance of every request's tree.

    Shape: target_tokens [bs, N] int64 or int32 (the target's argmax at every row, row 0 = the root)
    -> AcceptResult(num_accepted [bs] int32 (accepted drafts), accepted_node_idx [bs, max_depth + 1] int32, bonus_token
    [bs] int64). accepted_node_idx holds local rows (add ``b * N`` for SGLang's flattened
    ``accept_index``): column 0 is the root (0), columns 1..num_accepted the accepted nodes, the rest -1.
    New tokens this round: the accepted nodes' tokens, then the bonus token (the accept length, num_accepted + 1).
    """
    check_tree(tree)
    bs, n = tree.parents.shape
    if target_tokens.shape != (bs, n) or target_tokens.device != tree.parents.device:
        raise ValueError(f"target_tokens must be [{bs}, {n}] on {tree.parents.device}")
    if target_tokens.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"target_tokens must be int32 or int64, got {target_tokens.dtype}")
    if not use_triton("accept_greedy", tree.parents.device, backend):
        return accept_greedy_torch(tree, target_tokens)

    from sglang_ddtree.tree.kernels.accept import ddtree_accept_kernel

    dev = tree.parents.device
    target = target_tokens if target_tokens.stride(1) == 1 else target_tokens.contiguous()
    out = AcceptResult(
        num_accepted=torch.empty(bs, dtype=torch.int32, device=dev),
        accepted_node_idx=torch.empty(bs, tree.max_depth + 1, dtype=torch.int32, device=dev),
        bonus_token=torch.empty(bs, dtype=torch.int64, device=dev),
    )
    if bs == 0:
        return out
    ddtree_accept_kernel[(bs,)](
        tree.token_ids,
        tree.parents,
        tree.valid,
        target,
        out.num_accepted,
        out.accepted_node_idx,
        out.bonus_token,
        n,
        tree.max_depth,
        target.stride(0),
        BLOCK_N=next_pow2(n),
        BLOCK_L=next_pow2(tree.max_depth + 1),
        num_warps=num_warps_for_rows(n),
    )
    return out
