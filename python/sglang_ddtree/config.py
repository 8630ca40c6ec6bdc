"""DDTree configuration: the flag limits and the ONE frozen config every part of the round is built from.

Config flows one way: CLI flags / ``Engine`` kwargs -> ``ServerArgs`` fields
(``speculative_ddtree_budget``, ``speculative_ddtree_topk``) -> validated and mapped onto SGLang's
native speculative fields at argument validation (``sglang_ddtree.validation``) ->
``DDTreeConfig.from_server_args`` (the one derivation, used by the worker, the hooks and the metrics) ->
constructor arguments. Static shapes of a round (verify width, max depth, accept width, KV reserve) are
properties of this object and nowhere else. Also the one "is this DDTREE" predicate. This module imports
neither torch nor SGLang.

Vocabulary (also ``sglang_ddtree.tree``): a round verifies a tree of ``budget`` draft nodes plus the root;
**accepted drafts** are the draft nodes the target confirms (0..D); the round then commits them plus
one **bonus token**: **accept length** = accepted drafts + 1 (1..W), the paper's tau and SGLang's
``spec_accept_length`` / ``accept_lens``.
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


class DDTreeArgumentError(ValueError):
    """A DDTREE configuration error: the message names the flag, the value and what is allowed. On the
    command line it is printed as one line (``plugin`` hooks SGLang's argument parsing); ``sglang.Engine``
    callers get it as a ``ValueError``."""


def _check_int(flag: str, value: Any, lo: int, hi: int) -> int:
    """Return ``value`` as an int in [lo, hi] or raise a ValueError naming the flag and the range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise DDTreeArgumentError(
            f"{flag} must be an integer in [{lo}, {hi}], got {value!r} ({type(value).__name__})."
        )
    if not lo <= value <= hi:
        raise DDTreeArgumentError(f"{flag} must be in [{lo}, {hi}], got {value}.")
    return value


def check_budget(value: Any) -> int:
    return _check_int(BUDGET_FLAG, value, MIN_BUDGET, MAX_BUDGET)


def check_topk(value: Any) -> int:
    return _check_int(TOPK_FLAG, value, MIN_TOPK, MAX_TOPK)


def is_ddtree(value: Any) -> bool:
    """The one "is this DDTREE" predicate: ``value`` is the algorithm's name (any case), an upstream
    ``SpeculativeAlgorithm`` object (``.name``) or server args (``.speculative_algorithm``)."""
    if value is None:
        return False
    if not isinstance(value, str):
        value = getattr(value, "name", None) or getattr(value, "speculative_algorithm", None)
    return isinstance(value, str) and value.upper() == ALGORITHM_NAME


def is_validated_ddtree_args(server_args: Any) -> bool:
    """DDTREE server args that already passed validation (the DDTREE fields are filled in)."""
    return (
        is_ddtree(getattr(server_args, "speculative_algorithm", None))
        and getattr(server_args, "speculative_ddtree_budget", None) is not None
        and getattr(server_args, "speculative_ddtree_topk", None) is not None
        and getattr(server_args, "speculative_dflash_block_size", None) is not None
    )


@dataclasses.dataclass(frozen=True)
class DDTreeConfig:
    """What one DDTree round needs to know, fixed for the server's lifetime (all Python ints).

    budget:     draft-tree nodes per request (verify width is ``budget + 1`` with the root).
    topk:       max children per node (top-K draft tokens per block position); at most ``budget``.
    block_size: DFlash block size L of the drafter; the draft forward sees [bonus, mask x (L-1)].
    """

    budget: int
    topk: int
    block_size: int

    def __post_init__(self):
        check_budget(self.budget)
        check_topk(self.topk)
        if self.topk > self.budget:
            raise DDTreeArgumentError(f"{TOPK_FLAG} ({self.topk}) must not exceed {BUDGET_FLAG} ({self.budget}).")
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, int) or self.block_size < 2:
            raise DDTreeArgumentError(
                f"DDTREE needs a DFlash drafter with block size >= 2 (tree depth block size - 1), "
                f"got {self.block_size!r}."
            )

    @property
    def num_verify_tokens(self) -> int:
        """N: tokens per request in the target's verify forward (the root plus every tree node)."""
        return self.budget + 1

    @property
    def max_depth(self) -> int:
        """D: deepest reachable node; one block position per level, never more levels than nodes."""
        return min(self.budget, self.block_size - 1)

    @property
    def accept_width(self) -> int:
        """W = D + 1: the longest accept length (D accepted drafts + the bonus token); row width of the
        accepted-path tensors and the output stride of ``next_token_ids``."""
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
        the round's writes end at most W + slots_per_round past it."""
        return self.accept_width + self.slots_per_round

    @classmethod
    def from_server_args(cls, server_args) -> "DDTreeConfig":
        """The config of validated DDTREE server args (``sglang_ddtree.validation`` fills the fields;
        the drafter's view of them, see ``worker.draft_view``, gives the same config); raises
        ``ValueError`` for server args that did not pass DDTREE validation."""
        if not is_validated_ddtree_args(server_args):
            raise ValueError("DDTreeConfig.from_server_args needs server args validated for DDTREE.")
        return cls(
            budget=int(server_args.speculative_ddtree_budget),
            topk=int(server_args.speculative_ddtree_topk),
            block_size=int(server_args.speculative_dflash_block_size),
        )
