"""The worker's one door to the tree package ``sglang_ddtree.tree`` (BUILD TREE step and verify inputs).

``build_tree`` is the package's builder (fused Triton kernel on CUDA, PyTorch elsewhere; N = budget + 1
rows per request, row 0 the root, parent row < child row, siblings ascending, pads invalid);
``verify_topology`` unpacks the package's verify topology into the tuple the worker feeds SGLang's tree
verify; ``fill_root`` writes the bonus tokens into row 0 (in place).
"""

from __future__ import annotations

import torch

from sglang_ddtree.tree import Tree, build_tree, build_verify_topology

__all__ = ["Tree", "build_tree", "fill_root", "verify_topology"]


def verify_topology(tree: Tree, prefix_lens: torch.Tensor, seq_lens_sum_bound: int, bits_out=None):
    """Shape: prefix_lens [bs] int32/int64 (the root sits at that position); ``seq_lens_sum_bound`` a
    host int >= prefix_lens.sum(). Returns (custom_mask FULL_MASK [N * (bound + bs * N)] bool,
    positions [bs*N] int64, retrieve_index / retrieve_next_token / retrieve_next_sibling [bs, N] int64,
    -1 = none). Mask bytes past the requests' rows are unspecified and never read (backends index the
    mask by the device lengths). ``bits_out``: [bs*N, NW] int32 (fa3's fused tree attention,
    ``fa3_tree.round_bits_out``), which the same launch fills with the ancestor bits. No host sync."""
    topo = build_verify_topology(tree, prefix_lens, seq_lens_sum_bound, with_tree_mask=False, bits_out=bits_out)
    return (topo.custom_mask, topo.positions, topo.retrieve_index, topo.retrieve_next_token,
            topo.retrieve_next_sibling)


def fill_root(tree: Tree, root_tokens: torch.Tensor) -> torch.Tensor:
    """Write the root tokens into row 0 of the tree's tokens, in place (the builder leaves 0 there for
    the caller). Shape: root_tokens [bs] int. Returns ``tree.token_ids`` [bs, N] int64."""
    tree.token_ids[:, 0].copy_(root_tokens)
    return tree.token_ids
