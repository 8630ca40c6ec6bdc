"""Plain-data per-round tree state: the built tree, its verify topology and the acceptance result.

Serves the build tree -> verify -> accept steps of a DDTree round. Every tensor has a fixed shape
(``N = budget + 1`` rows per request), so the same buffers can be captured in a CUDA graph.
Vocabulary and conventions (node order, pad values) are defined once in ``sglang_ddtree.tree``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch


@dataclass(slots=True)
class Tree:
    """One round's draft trees, ``N = budget + 1`` rows per request (row order: ``sglang_ddtree.tree``).

    Row 0 is the root, rows ``1 .. num_nodes-1`` are real nodes, rows ``num_nodes ..`` are pads.
    """

    token_ids: torch.Tensor  # [bs, N] int64; root = caller's bonus token (0 if not given); pads 0
    parents: torch.Tensor  # [bs, N] int64; row of the parent; -1 for the root and for pads
    depths: torch.Tensor  # [bs, N] int64; root 0, nodes 1..max_depth, pads 0
    # [bs, N] float32; sum of draft log-probs on the root path; root 0, pads -inf. None for a chain-shaped round's
    # tree (``worker.chain_inputs``: structure only, nothing there reads scores)
    scores: Optional[torch.Tensor]
    valid: torch.Tensor  # [bs, N] bool; True for the root and real nodes (rows < num_nodes)
    num_nodes: torch.Tensor  # [bs] int32; 1 + number of real nodes (<= N)
    max_depth: int  # L - 1: the deepest possible node (static, for CUDA graphs)

    @property
    def batch_size(self) -> int:
        return self.token_ids.shape[0]

    @property
    def num_rows(self) -> int:
        """N = budget + 1."""
        return self.token_ids.shape[1]

    @property
    def budget(self) -> int:
        return self.token_ids.shape[1] - 1

    @classmethod
    def make_dummy(
        cls, bs: int, budget: int, device: torch.device | str, max_depth: int = 15
    ) -> "Tree":
        """A valid root-only tree (all other rows are pads): for CUDA-graph capture and tests."""
        n = budget + 1
        rows = torch.arange(n, device=device).expand(bs, n)
        return cls(
            token_ids=torch.zeros(bs, n, dtype=torch.int64, device=device),
            parents=torch.full((bs, n), -1, dtype=torch.int64, device=device),
            depths=torch.zeros(bs, n, dtype=torch.int64, device=device),
            scores=torch.where(
                rows == 0,
                torch.zeros((), device=device),
                torch.full((), float("-inf"), device=device),
            ).to(torch.float32),
            valid=(rows == 0).clone(),
            num_nodes=torch.ones(bs, dtype=torch.int32, device=device),
            max_depth=max_depth,
        )


@dataclass(slots=True)
class VerifyTopology:
    """What SGLang's tree verify needs, in the layouts its EAGLE/NGRAM code uses."""

    positions: torch.Tensor  # [bs * N] int64; seq_lens[b] + depth (pads: seq_lens[b])
    retrieve_index: torch.Tensor  # [bs, N] int64; b * N + row
    retrieve_next_token: torch.Tensor  # [bs, N] int64; first (lowest-row) child, -1 if none
    retrieve_next_sibling: torch.Tensor  # [bs, N] int64; next sibling (higher row), -1 if none
    tree_mask: Optional[torch.Tensor]  # [bs, N, N] bool; [b, i, j] = j is i or an ancestor of i
    custom_mask: Optional[torch.Tensor]  # [seq_lens_sum * N + bs * N * N] bool; FULL_MASK layout
    tree_bits: Optional[torch.Tensor] = None  # [bs * N, NW] int32; the tree mask's rows as bit words (bits_out)


class AcceptResult(NamedTuple):
    """Greedy acceptance; unpacks as ``(num_accepted, accepted_node_idx, bonus_token)``."""

    num_accepted: torch.Tensor  # [bs] int32; accepted drafts, root and bonus excluded (0..max_depth)
    accepted_node_idx: torch.Tensor  # [bs, max_depth + 1] int32; col 0 = root (0), then rows, pad -1
    bonus_token: torch.Tensor  # [bs] int64; target token at the deepest accepted node
