"""The worker's one door to tree construction and verify topology (BUILD TREE step).

Two implementations behind one interface, both following the ``sglang_ddtree.tree`` contract (N =
budget + 1 rows per request, row 0 the root, parent row < child row, siblings ascending, pads
invalid): the tree package (issue 3, Triton kernels on CUDA) and the worker's private stop-gap
(``_tree_stopgap``, PyTorch ops) kept until the package has run under the worker on a GPU.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from sglang_ddtree.worker import _tree_stopgap


@dataclasses.dataclass(frozen=True)
class TreeImpl:
    """build(log_probs [bs, L-1, K] f32, ids [bs, L-1, K] i64, budget) -> tree (token_ids, parents,
    depths, valid: [bs, N]);
    topology(tree, prefix_lens [bs], max_depth, seq_lens_sum_bound) -> (custom_mask FULL_MASK
    [N * (bound + bs * N)] bool, positions [bs*N] i64, retrieve_index / next_token / next_sibling
    [bs, N] i64). ``seq_lens_sum_bound`` is a host int >= prefix_lens.sum(); mask bytes past the
    requests' rows are never read (backends index the mask by the device lengths)."""

    name: str
    build: Callable
    topology: Callable


def _stopgap_topology(tree, prefix_lens, max_depth, seq_lens_sum_bound):
    n = tree.parents.shape[1]
    numel = n * (seq_lens_sum_bound + tree.parents.shape[0] * n)
    return _tree_stopgap.verify_topology(tree, prefix_lens, max_depth, numel)


def _package_topology(tree, prefix_lens, max_depth, seq_lens_sum_bound):
    from sglang_ddtree.tree import build_verify_topology

    topo = build_verify_topology(tree, prefix_lens, seq_lens_sum_bound, with_tree_mask=False)
    return (topo.custom_mask, topo.positions, topo.retrieve_index, topo.retrieve_next_token,
            topo.retrieve_next_sibling)


STOPGAP = TreeImpl("stopgap", _tree_stopgap.build_tree, _stopgap_topology)


def resolve_tree_impl(impl: str = "auto") -> TreeImpl:
    """``impl``: "auto" (the tree package when importable), "package" or "stopgap"."""
    if impl == "stopgap":
        return STOPGAP
    try:
        from sglang_ddtree.tree import build_tree
    except ImportError:
        if impl == "package":
            raise
        return STOPGAP
    return TreeImpl("package", build_tree, _package_topology)


def fill_root(tree, root_tokens: torch.Tensor) -> torch.Tensor:
    """Shape: root_tokens [bs] int. Returns the tree's tokens [bs, N] int64 with row 0 = root_tokens."""
    tokens = tree.token_ids.clone()
    tokens[:, 0] = root_tokens.to(torch.int64)
    return tokens
