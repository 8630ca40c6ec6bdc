"""DDTree configuration: the flag limits and the one frozen config the worker is built from.

Config flows one way: CLI flags / ``Engine`` kwargs -> ``ServerArgs`` fields
(``speculative_ddtree_budget``, ``speculative_ddtree_topk``) -> validated and mapped onto SGLang's
native speculative fields at argument validation (``sglang_ddtree.validation``) ->
``DDTreeConfig.from_server_args`` -> constructor arguments of the worker.
This module imports neither torch nor SGLang.
"""

from __future__ import annotations

import dataclasses
from typing import Any

ALGORITHM_NAME = "DDTREE"

# --speculative-ddtree-budget: draft-tree nodes per request and round (the root, i.e. the bonus token
# of the previous round, is extra, so the target verifies budget + 1 tokens per request).
DEFAULT_BUDGET = 64
MIN_BUDGET = 1
MAX_BUDGET = 1024  # verify width 1025 tokens/request; beyond this a forward is compute-bound anyway

# --speculative-ddtree-topk: at most this many children per node (top-K draft tokens per position).
DEFAULT_TOPK = 8
MIN_TOPK = 1
MAX_TOPK = 64

BUDGET_FLAG = "--speculative-ddtree-budget"
TOPK_FLAG = "--speculative-ddtree-topk"


def _check_int(flag: str, value: Any, lo: int, hi: int) -> int:
    """Return ``value`` as an int in [lo, hi] or raise a ValueError naming the flag and the range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            f"{flag} must be an integer in [{lo}, {hi}], got {value!r} ({type(value).__name__})."
        )
    if not lo <= value <= hi:
        raise ValueError(f"{flag} must be in [{lo}, {hi}], got {value}.")
    return value


def check_budget(value: Any) -> int:
    return _check_int(BUDGET_FLAG, value, MIN_BUDGET, MAX_BUDGET)


def check_topk(value: Any) -> int:
    return _check_int(TOPK_FLAG, value, MIN_TOPK, MAX_TOPK)


@dataclasses.dataclass(frozen=True)
class DDTreeConfig:
    """What one DDTree round needs to know, fixed for the server's lifetime.

    budget:     draft-tree nodes per request (verify width is ``budget + 1`` with the root).
    topk:       max children per node; already capped at ``budget`` (a wider fan-out cannot fit).
    block_size: DFlash block size L of the drafter; the tree is at most ``L - 1`` deep.
    """

    budget: int
    topk: int
    block_size: int

    def __post_init__(self):
        check_budget(self.budget)
        check_topk(self.topk)
        if self.topk > self.budget:
            raise ValueError(f"topk ({self.topk}) must not exceed budget ({self.budget}).")
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, int) or self.block_size < 2:
            raise ValueError(f"DFlash block size must be an integer >= 2, got {self.block_size!r}.")

    @property
    def num_verify_tokens(self) -> int:
        """Tokens per request in the target's verify forward: the root plus every tree node."""
        return self.budget + 1

    @property
    def max_depth(self) -> int:
        """Deepest tree level: one draft position per level below the root."""
        return self.block_size - 1

    @classmethod
    def from_server_args(cls, server_args) -> "DDTreeConfig":
        """Build from server args that already passed DDTREE validation (see ``validation``)."""
        return cls(
            budget=int(server_args.speculative_ddtree_budget),
            topk=int(server_args.speculative_ddtree_topk),
            block_size=int(server_args.speculative_dflash_block_size),
        )
