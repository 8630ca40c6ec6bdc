"""TEMPORARY private best-first tree builder (paper Algorithm 1) until
``sglang_ddtree.tree.reference.build_tree_reference`` lands; then this file goes away.

Serves the BUILD TREE step: the ``budget`` highest-scoring prefixes, score = sum of draft log-probs.
"""

from __future__ import annotations

import heapq

import torch


def build_tree_reference(top_log_probs: torch.Tensor, top_token_ids: torch.Tensor, budget: int):
    """Shape: top_log_probs [L-1, K] float32 sorted descending per row; top_token_ids [L-1, K] int64.
    Returns (token_ids [n] int64, parents [n] int64 (-1 = child of the root), depths [n] int64),
    n = min(budget, reachable nodes), nodes in pop order (parents before children, siblings by rank)."""
    lp, ids = top_log_probs.reshape(-1, top_log_probs.shape[-1]).tolist(), top_token_ids.reshape(-1, top_token_ids.shape[-1])
    depth_max, K = len(lp), len(lp[0])
    tokens, parents, depths = [], [], []
    heap = [(-lp[0][0], 0, -1, 1, 0)]  # (-score, tie-break, parent node, depth, rank)
    counter = 1
    while heap and len(tokens) < budget:
        neg, _, parent, depth, rank = heapq.heappop(heap)
        node = len(tokens)
        tokens.append(int(ids[depth - 1, rank])); parents.append(parent); depths.append(depth)
        parent_score = -neg - lp[depth - 1][rank]
        if rank + 1 < K:  # next sibling
            heapq.heappush(heap, (-(parent_score + lp[depth - 1][rank + 1]), counter, parent, depth, rank + 1))
            counter += 1
        if depth < depth_max:  # first child
            heapq.heappush(heap, (neg - lp[depth][0], counter, node, depth + 1, 0))
            counter += 1
    return torch.tensor(tokens), torch.tensor(parents), torch.tensor(depths)
