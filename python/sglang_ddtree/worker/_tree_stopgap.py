"""TEMPORARY private stand-in for ``sglang_ddtree.tree`` (issue 3) until it lands; then this file goes.

Serves the BUILD TREE step and the verify topology, batched, fixed-shape and free of host syncs:
- ``build_tree``: per depth, keep the top-``budget`` of (kept parents x top-K tokens), then take the
  global top-``budget`` over all depths (DESIGN.md "Building the tree on the GPU, exactly"); lay the
  nodes out depth-major (parent index < child index, siblings ascending, first child lowest).
- ``verify_topology``: SGLang's FULL_MASK custom mask, positions and retrieve_* arrays for it.
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class StopgapTree:
    """One round's trees, N = budget + 1 rows per request; row 0 is the root (caller fills its token).
    Unused rows are padding: ``valid`` False, parent -1, depth 0, token 0, score -inf."""

    token_ids: torch.Tensor  # [bs, N] int64
    parents: torch.Tensor  # [bs, N] int64, -1 for the root and padding
    depths: torch.Tensor  # [bs, N] int64
    scores: torch.Tensor  # [bs, N] float32, root 0
    valid: torch.Tensor  # [bs, N] bool


def build_tree(top_log_probs: torch.Tensor, top_token_ids: torch.Tensor, budget: int) -> StopgapTree:
    """Shape: top_log_probs [bs, L-1, K] float32 (sorted descending per position),
    top_token_ids [bs, L-1, K] int64. Returns a ``StopgapTree`` with N = budget + 1 rows."""
    bs, depth_max, k = top_log_probs.shape
    device = top_log_probs.device
    n = budget + 1
    prev = torch.zeros((bs, 1), dtype=torch.float32, device=device)
    scores, tokens, parent_pos = [], [], []
    for d in range(min(depth_max, budget)):
        cand = (prev.unsqueeze(2) + top_log_probs[:, d, :].float().unsqueeze(1)).reshape(bs, -1)
        s, flat = cand.topk(min(budget, cand.shape[1]), dim=1)
        scores.append(s)
        tokens.append(top_token_ids[:, d, :].gather(1, flat % k))
        parent_pos.append(flat // k)
        prev = s
    widths = [s.shape[1] for s in scores]
    all_scores = torch.cat(scores, dim=1)  # [bs, T], depth-major, score-descending within a depth
    total = all_scores.shape[1]
    selected = torch.zeros((bs, total), dtype=torch.bool, device=device)
    if total <= budget:
        selected.fill_(True)
    else:
        selected.scatter_(1, all_scores.topk(budget, dim=1).indices, True)
    # Ties may select a node without its parent: drop such nodes so the tree stays prefix-closed.
    offsets = [0]
    for w in widths:
        offsets.append(offsets[-1] + w)
    for d in range(1, len(widths)):
        parent_sel = selected[:, offsets[d - 1] : offsets[d]].gather(1, parent_pos[d])
        selected[:, offsets[d] : offsets[d + 1]] &= parent_sel
    row = torch.cumsum(selected.to(torch.int64), dim=1)  # 1-based row of each selected candidate
    parent_row = [torch.zeros_like(parent_pos[0])]
    for d in range(1, len(widths)):
        parent_row.append(row[:, offsets[d - 1] : offsets[d]].gather(1, parent_pos[d]))
    depth_of = torch.cat(
        [torch.full((bs, w), d + 1, dtype=torch.int64, device=device) for d, w in enumerate(widths)], dim=1
    )
    dest = torch.where(selected, row, torch.full_like(row, n))  # column n is a dump slot

    def scatter(values, fill, dtype):
        out = torch.full((bs, n + 1), fill, dtype=dtype, device=device)
        out.scatter_(1, dest, values.to(dtype))
        return out[:, :n]

    token_ids = scatter(torch.cat(tokens, dim=1), 0, torch.int64)
    parents = scatter(torch.cat(parent_row, dim=1), -1, torch.int64)
    depths = scatter(depth_of, 0, torch.int64)
    node_scores = scatter(all_scores, float("-inf"), torch.float32)
    valid = scatter(torch.ones_like(selected), False, torch.bool)
    valid[:, 0] = True
    node_scores[:, 0] = 0.0
    return StopgapTree(token_ids, parents, depths, node_scores, valid)


def ancestor_mask(parents: torch.Tensor, max_depth: int) -> torch.Tensor:
    """Shape: parents [bs, N] int64 (-1 = none). Returns [bs, N, N] bool, [b, i, j] True iff node j
    is node i or one of its ancestors. ``max_depth`` bounds the walk (static)."""
    bs, n = parents.shape
    anc = torch.eye(n, dtype=torch.bool, device=parents.device).expand(bs, n, n).clone()
    cur = torch.arange(n, device=parents.device).expand(bs, n)
    for _ in range(max_depth):
        cur = torch.where(cur >= 0, parents.gather(1, cur.clamp(min=0)), cur)
        hit = torch.zeros_like(anc)
        hit.scatter_(2, cur.clamp(min=0).unsqueeze(2), (cur >= 0).unsqueeze(2))
        anc |= hit
    return anc


def _first_true(x: torch.Tensor) -> torch.Tensor:
    """Index of the first True along the last dim, -1 where none."""
    first = x.to(torch.int8).argmax(dim=-1)
    return torch.where(x.any(dim=-1), first, torch.full_like(first, -1))


def verify_topology(tree: StopgapTree, prefix_lens: torch.Tensor, max_depth: int, mask_numel: int):
    """The target verify's inputs for ``tree``.

    Shape: prefix_lens [bs] int (committed length; the root sits at that position).
    Returns (custom_mask [mask_numel] bool, positions [bs*N] int64, retrieve_index,
    retrieve_next_token, retrieve_next_sibling: [bs, N] int64, -1 = none).
    custom_mask is SGLang's FULL_MASK layout: per request N rows of (prefix_len + N) bools, prefix
    all True, tree part ancestor-or-self; requests back to back; slots past the last request stay
    True. ``mask_numel`` (a host int) must be >= N * sum(prefix_lens + N) (use a host upper bound).
    Memory: N * (prefix + N) bytes per request plus a [bs, N, N] index temp.
    """
    parents, valid = tree.parents, tree.valid
    bs, n = parents.shape
    device = parents.device
    prefix = prefix_lens.to(torch.int64)
    anc = ancestor_mask(parents, max_depth)
    row_len = prefix + n
    req_off = n * (torch.cumsum(row_len, 0) - row_len)
    r = torch.arange(n, device=device, dtype=torch.int64)
    idx = (req_off.view(bs, 1, 1) + r.view(1, n, 1) * row_len.view(bs, 1, 1)
           + prefix.view(bs, 1, 1) + r.view(1, 1, n))
    custom_mask = torch.ones((mask_numel,), dtype=torch.bool, device=device)
    custom_mask[idx.reshape(-1)] = anc.reshape(-1)

    positions = (prefix.view(bs, 1) + tree.depths).reshape(-1)
    retrieve_index = torch.arange(bs * n, device=device, dtype=torch.int64).view(bs, n)
    is_node = valid & (r.view(1, n) > 0)  # drafted nodes (root and padding excluded)
    child = (parents.view(bs, 1, n) == r.view(1, n, 1)) & is_node.view(bs, 1, n)  # [b, parent, child]
    retrieve_next_token = _first_true(child)
    sibling = (
        (parents.view(bs, 1, n) == parents.view(bs, n, 1))
        & is_node.view(bs, 1, n)
        & is_node.view(bs, n, 1)
        & (r.view(1, 1, n) > r.view(1, n, 1))
    )
    retrieve_next_sibling = _first_true(sibling)
    return custom_mask, positions, retrieve_index, retrieve_next_token, retrieve_next_sibling
