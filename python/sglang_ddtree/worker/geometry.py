"""Static shapes of one DDTree decode round, derived once from the validated server args.

Serves every step of the round (draft -> build tree -> verify -> accept -> commit): how many tokens
the drafter sees (block size L), how many the target verifies (budget + 1), how deep a tree can be,
how wide the accepted-path rows are, and how many KV slots past the committed length a request must
have reserved before a round starts. Imports neither torch nor SGLang.
"""

from __future__ import annotations

import dataclasses
import json
import os


@dataclasses.dataclass(frozen=True)
class RoundGeometry:
    """Per-round shapes (all Python ints, fixed for the server's lifetime).

    budget:     draft-tree nodes per request (the root is extra).
    topk:       max children per node (top-K draft tokens per block position).
    block_size: DFlash block size L; the draft forward sees [bonus, mask x (L-1)].
    """

    budget: int
    topk: int
    block_size: int

    def __post_init__(self):
        assert self.budget >= 1 and self.topk >= 1 and self.block_size >= 2, self

    @property
    def num_verify_tokens(self) -> int:
        """N: tokens per request in the target verify forward (root + budget nodes)."""
        return self.budget + 1

    @property
    def max_depth(self) -> int:
        """D: deepest reachable node; one block position per level, and never more levels than nodes."""
        return min(self.budget, self.block_size - 1)

    @property
    def accept_width(self) -> int:
        """W = D + 1: row width of accepted-path tensors (root + up to D accepted drafts); the
        output stride of ``next_token_ids`` (accepted drafts + bonus <= D + 1 tokens)."""
        return self.max_depth + 1

    @property
    def slots_per_round(self) -> int:
        """KV slots past the true committed length one round writes: the draft block writes L
        (draft pool), the verify writes N (target pool), both starting at the committed length."""
        return max(self.block_size, self.num_verify_tokens)

    @property
    def reserve_per_decode(self) -> int:
        """Slots to reserve past the scheduler's committed length before a round. Under overlap
        scheduling that length lags the true one by at most one round's commit (<= W tokens), so
        the round's writes end at most W + slots_per_round past it. Equals DFLASH's 2 * block when
        L == N; larger than 2 * N when budget + 1 < L."""
        return self.accept_width + self.slots_per_round

    @classmethod
    def from_server_args(cls, server_args, check_verify_width: bool = True) -> "RoundGeometry":
        """Read the DDTREE fields (see ``sglang_ddtree.validation`` for the mapping)."""
        block_size = getattr(server_args, "speculative_dflash_block_size", None)
        if block_size is None:
            block_size = read_draft_block_size(server_args.speculative_draft_model_path)
        geometry = cls(
            budget=int(server_args.speculative_ddtree_budget),
            topk=int(server_args.speculative_ddtree_topk),
            block_size=int(block_size),
        )
        verify = server_args.speculative_num_draft_tokens
        if check_verify_width and verify is not None and int(verify) != geometry.num_verify_tokens:
            raise ValueError(
                "DDTREE expects speculative_num_draft_tokens == speculative_ddtree_budget + 1 "
                f"(the target verify width), got {verify} with budget {geometry.budget}."
            )
        return geometry


def read_draft_block_size(draft_model_path: str) -> int:
    """Block size from a local DFlash drafter's config.json (``block_size`` or
    ``dflash_config.block_size``); raise ``ValueError`` when absent."""
    path = os.path.join(str(draft_model_path), "config.json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except OSError as e:
        raise ValueError(f"DDTREE: cannot read the drafter config {path}: {e}") from e
    size = cfg.get("block_size") or (cfg.get("dflash_config") or {}).get("block_size")
    if size is None:
        raise ValueError(f"DDTREE: the drafter config {path} names no block_size.")
    return int(size)


def draft_server_args_view(server_args, geometry: RoundGeometry):
    """A copy of the target's server args as the DFlash draft runner must see them.

    The target's args say verify width ``budget + 1`` and fan-out ``topk``; the draft runner's
    CUDA graphs, attention backend and block buffers must instead see the block size L and topk 1
    (what DFLASH gives its drafter). The copy drops the cached ``max_speculative_num_draft_tokens``
    so it is recomputed from the new width.
    """
    import copy

    view = copy.deepcopy(server_args)
    view.__dict__.pop("max_speculative_num_draft_tokens", None)
    fields = dict(speculative_num_draft_tokens=geometry.block_size, speculative_eagle_topk=1)
    if hasattr(view, "override"):
        view.override("ddtree.draft_view", **fields)
    else:  # plain objects in CPU tests
        for name, value in fields.items():
            setattr(view, name, value)
    return view
