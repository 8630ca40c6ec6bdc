"""Verify inputs of a chain-shaped round: width 0 (the root alone) and budget auto's chain bucket (BUILD + VERIFY).

A chain's shape does not depend on what was drafted: row d is the node at depth d, its parent is row d - 1, every
row is real, and it verifies at position prefix + d. So a chain-shaped round needs none of a tree round's per-round
structure work:
  - no tree build: the tokens are the root (the bonus token) and, for the chain bucket, the drafter's top-1 token of
    each block position, one ``torch.cat``; parents, depths, validity and node counts are views of constants;
  - no verify topology: positions are prefix + row offsets (width 0: the prefix itself); the retrieve links are
    views of constants; a FULL_MASK only where the verify reads one (width 0 on a backend that verifies with a mask:
    all True, a view of a buffer of ones), none where it verifies causally (``DDTreeConfig.verifies_causally``);
  - no KV move: the accepted path's node at depth d sits in row d, verified at slot req_to_token[prefix + d], which
    is already its final slot (every move the commit lists is a slot onto itself).
What the round then runs is the tree round's: the same ACCEPT + COMMIT launch (``kv_commit.greedy_accept_commit``)
on this tree, and the same draft-KV append. The constants are sized for the largest batch seen; a larger batch
grows them once (host-side shape check, no sync).
"""

from __future__ import annotations

from typing import Dict, Iterable, Optional, Tuple

import torch

from sglang_ddtree.config import DDTreeConfig, is_chain
from sglang_ddtree.tree import Tree


class ChainInputs:
    """Constant structure of chains of ``rows`` verify rows each (1 for width 0, D + 1 for the chain bucket) and the
    per-round views of it. ``max_depth``: the trees' ``Tree.max_depth`` (L - 1)."""

    def __init__(self, rows: Iterable[int], *, max_depth: int, device, batch_size: int = 1):
        self.rows = tuple(sorted({int(n) for n in rows}))
        if not self.rows or self.rows[0] < 1:
            raise ValueError(f"chain rows must be >= 1, got {rows!r}")
        self.max_depth = int(max_depth)
        self.device = torch.device(device)
        self.capacity = 0
        self._const: Dict[int, Dict[str, torch.Tensor]] = {}
        self._ones = torch.ones(0, dtype=torch.bool, device=self.device)
        self._reserve(max(1, int(batch_size)))

    @classmethod
    def for_config(cls, config: DDTreeConfig, *, device, batch_size: int = 1) -> "ChainInputs":
        """The chains of ``config``'s chain-shaped buckets: width 0 and, where budget auto holds it, the chain
        bucket; trees of depth up to L - 1."""
        rows = [1] + [b + 1 for b in config.buckets if is_chain(b)]
        return cls(rows, max_depth=config.draft_positions, device=device, batch_size=batch_size)

    def _reserve(self, bs: int) -> None:
        if bs <= self.capacity:
            return
        cap = max(bs, 2 * self.capacity)
        i64 = dict(dtype=torch.int64, device=self.device)
        for n in self.rows:
            row = torch.arange(n, **i64)
            self._const[n] = {
                "offsets": row,
                "parents": (row - 1).expand(cap, n).contiguous(),
                "depths": row.expand(cap, n).contiguous(),
                "valid": torch.ones(cap, n, dtype=torch.bool, device=self.device),
                "num_nodes": torch.full((cap,), n, dtype=torch.int32, device=self.device),
                "retrieve_index": (torch.arange(cap, **i64).view(cap, 1) * n + row).contiguous(),
                "retrieve_next_token": torch.where(row + 1 < n, row + 1, -1).expand(cap, n).contiguous(),
                "retrieve_next_sibling": torch.full((cap, n), -1, **i64),
            }
        self.capacity = cap

    def tokens(self, root: torch.Tensor, drafts: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The verify tokens: root [bs] int64 (the bonus tokens), drafts [bs, D] int64 or None -> [bs, N] int64
        (width 0: a view of ``root``)."""
        root = root.view(-1, 1)
        return root if drafts is None else torch.cat([root, drafts], dim=1)

    def tree(self, tokens: torch.Tensor) -> Tree:
        """The chain of ``tokens`` [bs, N] as a ``Tree`` (no scores: nothing a chain-shaped round runs reads them)."""
        bs, n = tokens.shape
        self._reserve(bs)
        c = self._const[n]
        return Tree(token_ids=tokens, parents=c["parents"][:bs], depths=c["depths"][:bs], scores=None,
                    valid=c["valid"][:bs], num_nodes=c["num_nodes"][:bs], max_depth=self.max_depth)

    def tree_of(self, root: torch.Tensor, token_ids: Optional[torch.Tensor], bucket) -> Tree:
        """A chain-shaped round's tree: root [bs] int64 (the bonus tokens) and, for the chain bucket, the top-1
        column of the draft's token_ids [bs, L-1, K] int64 (None at width 0); its tokens are ``tree.token_ids``."""
        drafts = int(bucket)
        return self.tree(self.tokens(root, token_ids[:, :drafts, 0] if drafts else None))

    def positions(self, prefix: torch.Tensor, n: int) -> torch.Tensor:
        """prefix [bs] int (the root's position) -> [bs * N] int64: prefix + row (width 0: the prefix itself)."""
        prefix = prefix if prefix.dtype == torch.int64 else prefix.to(torch.int64)
        if n == 1:
            return prefix.view(-1)
        return (prefix.view(-1, 1) + self._const[n]["offsets"]).view(-1)

    def links(self, bs: int, n: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(retrieve_index, retrieve_next_token, retrieve_next_sibling) [bs, N] int64: ``tree_api.verify_topology``'s
        links of the chain (b * N + row; row + 1, -1 at the end; -1)."""
        self._reserve(bs)
        c = self._const[n]
        return c["retrieve_index"][:bs], c["retrieve_next_token"][:bs], c["retrieve_next_sibling"][:bs]

    def root_mask(self, bs: int, seq_lens_sum_bound: int) -> torch.Tensor:
        """The FULL_MASK of a width-0 verify (one row per request, which sees its prefix and itself): all True,
        [seq_lens_sum_bound + bs] bool, ``verify_topology``'s size at N = 1. A view of a buffer of ones that
        grows (doubling) when a round needs more."""
        need = int(seq_lens_sum_bound) + int(bs)
        if need > self._ones.numel():
            self._ones = torch.ones(max(need, 2 * self._ones.numel()), dtype=torch.bool, device=self.device)
        return self._ones[:need]
