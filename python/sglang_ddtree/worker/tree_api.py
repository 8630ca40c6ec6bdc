"""The worker's one door to tree construction and verify topology (BUILD TREE step).

Uses ``sglang_ddtree.tree`` (issue 3) when it provides ``build_tree``; until then, and for the
topology, the private stop-gap in ``_tree_stopgap``. Both follow the same contract: N = budget + 1
rows per request, row 0 the root, parent index < child index, siblings ascending, pads invalid.
"""

from __future__ import annotations

import logging

import torch

from sglang_ddtree.worker import _tree_stopgap

logger = logging.getLogger(__name__)


def _package_build_tree():
    try:
        from sglang_ddtree.tree import build_tree
    except ImportError:
        return None
    return build_tree


def resolve_build_tree(impl: str = "auto"):
    """``impl``: "auto" (the tree package when importable), "package" or "stopgap"."""
    if impl == "stopgap":
        return _tree_stopgap.build_tree
    fn = _package_build_tree()
    if fn is None:
        if impl == "package":
            raise RuntimeError("sglang_ddtree.tree.build_tree is not available")
        return _tree_stopgap.build_tree
    return fn


def verify_topology(tree, prefix_lens: torch.Tensor, max_depth: int, mask_numel: int):
    """See ``_tree_stopgap.verify_topology`` (shapes, layouts and pad values)."""
    return _tree_stopgap.verify_topology(tree, prefix_lens, max_depth, mask_numel)
