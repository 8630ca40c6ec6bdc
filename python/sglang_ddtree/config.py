"""DDTree configuration: the flag limits and the ONE frozen config every part of the round is built from.

Config flows one way: CLI flags / ``Engine`` kwargs -> ``ServerArgs`` fields
(``speculative_ddtree_budget``, ``speculative_ddtree_topk``) -> validated and mapped onto SGLang's
native speculative fields at argument validation (``sglang_ddtree.validation``) ->
``DDTreeConfig.from_server_args`` (the one derivation, used by the worker, the hooks and the metrics) ->
constructor arguments. Static shapes of a round (verify width, max depth, accept width, KV reserve) are
properties of this object and nowhere else. Also the one "is this DDTREE" predicate. This module imports
neither torch nor SGLang at import time (reading server args asks the compat adapter).

Vocabulary (also ``sglang_ddtree.tree``): a round verifies a tree of ``budget`` draft nodes plus the root;
**accepted drafts** are the draft nodes the target confirms (0..D); the round then commits them plus
one **bonus token**: **accept length** = accepted drafts + 1 (1..W), the paper's tau and SGLang's
``spec_accept_length`` / ``accept_lens``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

ALGORITHM_NAME = "DDTREE"

# --speculative-ddtree-budget: draft-tree nodes per request and round (the root, i.e. the bonus token
# of the previous round, is extra, so the target verifies budget + 1 tokens per request).
DEFAULT_BUDGET = 64
# On a hybrid (Gated DeltaNet) target every tree row keeps its own recurrent state in every GDN layer, so rows cost
# far more there: 15 (16 rows, DFLASH's verify width and state memory) is its default. At the Qwen3.5-9B shape on the
# H200 its round cost 1.02-1.07x DFLASH's at c 1-16 (session 26, README "Hybrid speed"); budget 64's per-row states
# for 48 requests (150 GiB there) do not fit one H200.
HYBRID_DEFAULT_BUDGET = 15
MIN_BUDGET = 1
MAX_BUDGET = 1024  # verify width 1025 tokens/request; beyond this a forward is compute-bound anyway

# --speculative-ddtree-topk: at most this many children per node (top-K draft tokens per position).
DEFAULT_TOPK = 8
MIN_TOPK = 1
MAX_TOPK = 64

# --speculative-ddtree-budget auto: each round picks its verify budget from a bucket set (0 = no drafting,
# 2^k - 1 up to AUTO_MAX_BUDGET) by expected committed tokens per second (``sglang_ddtree.width_policy``);
# "auto:N" stops the set at N (``auto_largest_bucket``).
AUTO = "auto"
AUTO_MAX_BUDGET = 63
# Where budget auto is the default when no budget is given (session 43's decision, README "Budget auto"): the
# configurations its GPU checks covered (greedy parity, T > 0, the everyday features, the 8B shape);
# DEFAULT_BUDGET elsewhere (``validation.auto_default_unverified`` says why, in the start-up log).
AUTO_DEFAULT_BACKENDS = ("fa3", "triton")
AUTO_DEFAULT_SCOPE = "--tp-size 1, --page-size 1, fa3 (DDTREE's fused tree attention) or triton, SGLang 0.5.16"

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


def auto_largest_bucket(value: Any) -> Optional[int]:
    """Budget auto's largest bucket for a ``--speculative-ddtree-budget`` value: "auto" -> ``AUTO_MAX_BUDGET``,
    "auto:N" -> N (budget auto whose buckets stop at N, an integer in [MIN_BUDGET, AUTO_MAX_BUDGET]; validation
    writes it for a hybrid target whose per-row states would not fit with the full set); None for any other value.
    Raises ``DDTreeArgumentError`` for a malformed "auto:..." value."""
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    if text == AUTO:
        return AUTO_MAX_BUDGET
    if not text.startswith(AUTO + ":"):
        return None
    largest = text[len(AUTO) + 1:].strip()
    if not largest.isdigit() or not MIN_BUDGET <= int(largest) <= AUTO_MAX_BUDGET:
        raise DDTreeArgumentError(
            f"{BUDGET_FLAG} {value!r}: '{AUTO}:N' is budget {AUTO} with buckets up to N, an integer in "
            f"[{MIN_BUDGET}, {AUTO_MAX_BUDGET}].")
    return int(largest)


def auto_budget_value(largest: int) -> str:
    """The ``--speculative-ddtree-budget`` value of budget auto with buckets up to ``largest``."""
    return AUTO if int(largest) == AUTO_MAX_BUDGET else f"{AUTO}:{int(largest)}"


def check_budget(value: Any, *, allow_auto: bool = False):
    """An int in [MIN_BUDGET, MAX_BUDGET] (or, with ``allow_auto``, "auto" / "auto:N" in any case: returns its
    canonical form, ``auto_budget_value``)."""
    largest = auto_largest_bucket(value) if allow_auto else None
    if largest is not None:
        return auto_budget_value(largest)
    if allow_auto and (isinstance(value, bool) or not isinstance(value, int)):
        raise DDTreeArgumentError(
            f"{BUDGET_FLAG} must be an integer in [{MIN_BUDGET}, {MAX_BUDGET}] or '{AUTO}', got {value!r} "
            f"({type(value).__name__})."
        )
    return _check_int(BUDGET_FLAG, value, MIN_BUDGET, MAX_BUDGET)


def bucket_budgets(max_budget: int, *, smallest: int = 1) -> tuple:
    """The candidate budgets for ``max_budget``, ascending: 0 (no drafting), every 2^k - 1 from ``smallest``
    below ``max_budget``, and ``max_budget`` itself; e.g. 64 -> (0, 1, 3, 7, 15, 31, 63, 64).

    2^k - 1 because a round verifies budget + 1 tokens per request and the target's GEMMs tile the token
    dimension in powers of two: on the H200 at the Qwen3-8B shape, batch 32, DDTREE budget 16 (544 verify
    tokens) spent 3.5 ms more in the verify forward than DFLASH's 512 (``benchmark/results``, session 6)."""
    if max_budget < 1:
        raise ValueError(f"max_budget must be >= 1, got {max_budget}")
    out, n = [0], 2
    while n - 1 < max_budget:
        if n - 1 >= smallest:
            out.append(n - 1)
        n *= 2
    out.append(int(max_budget))
    return tuple(out)


class ChainBucket(int):
    """Budget auto's chain bucket: the top-1 draft of every block position, ``int(self)`` drafts in a row (the
    chain DFLASH verifies), beside the tree buckets of the same verify width. As an int it is its draft count,
    so ``bucket + 1`` is its verify rows and ``bucket > 0`` says it drafts; as a key it is its own
    (``ChainBucket(15) != 15``: costs, accept ratios and graphs are the chain's, not budget 15's tree's), and it
    prints as ``chain15`` (logs, ``/metrics`` labels). Where the target verifies on fa3 with DDTREE's fused tree
    attention (``worker.fa3_tree``), its verify is upstream's causal one, DFLASH's (no tree merge, no ancestor
    bits), so a load at which no tree pays for its extra kernels can take DFLASH's round (``DDTreeConfig.chain``)."""

    def __new__(cls, drafts: int):
        if isinstance(drafts, bool) or int(drafts) < 1:
            raise ValueError(f"a chain bucket needs >= 1 drafts, got {drafts!r}")
        return super().__new__(cls, int(drafts))

    def __eq__(self, other):
        return isinstance(other, ChainBucket) and int(self) == int(other)

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash(("chain", int(self)))

    def __repr__(self):
        return f"chain{int(self)}"

    __str__ = __repr__

    def __format__(self, spec):
        return format(repr(self), spec)


def is_chain(bucket) -> bool:
    """Whether a bucket of ``DDTreeConfig.buckets`` is the chain bucket (``ChainBucket``) rather than a tree's
    budget."""
    return isinstance(bucket, ChainBucket)


def chain_shaped(bucket) -> bool:
    """Whether a round of ``bucket`` verifies a chain: width 0 (the root alone) or the chain bucket. Its structure is
    constant (``worker.chain_inputs``): no tree build, no verify topology, no KV move."""
    return is_chain(bucket) or int(bucket) == 0


def parse_bucket(text: str):
    """A bucket from its printed name: "15" -> 15, "chain15" -> ``ChainBucket(15)`` (``/metrics`` labels,
    accept tables); a ValueError for anything else."""
    text = str(text).strip()
    if text.startswith("chain"):
        return ChainBucket(int(text[len("chain"):]))
    return int(text)


def parse_budget_arg(text: str):
    """argparse ``type=`` of --speculative-ddtree-budget: an integer, "auto" or "auto:N"; the range is checked at
    validation (``check_budget``), which names the flag."""
    import argparse

    stripped = text.strip()
    if stripped.lower() == AUTO or stripped.lower().startswith(AUTO + ":"):
        return stripped.lower()
    try:
        return int(stripped)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: an integer or '{AUTO}'") from None


def check_topk(value: Any) -> int:
    return _check_int(TOPK_FLAG, value, MIN_TOPK, MAX_TOPK)


def env_switch(name: str, *, on: str, off: str, error=ValueError, default: bool = False) -> bool:
    """An on/off environment variable: 0 -> False, 1 -> True, unset or empty -> ``default``, anything else an
    ``error`` naming the variable, the value and both meanings."""
    value = os.environ.get(name, "").strip()
    if value == "":
        return default
    if value == "0":
        return False
    if value == "1":
        return True
    raise error(f"{name}={value!r}: use 1 ({on}) or 0 ({off}).")


def is_ddtree(value: Any) -> bool:
    """The one "is this DDTREE" predicate: ``value`` is the algorithm's name (any case), an upstream
    ``SpeculativeAlgorithm`` object (``.name``) or server args (``.speculative_algorithm``)."""
    if value is None:
        return False
    if not isinstance(value, str):
        value = getattr(value, "name", None) or getattr(value, "speculative_algorithm", None)
    return isinstance(value, str) and value.upper() == ALGORITHM_NAME


def resolved_args(server_args: Any) -> Any:
    """``server_args`` as resolution left it, to read fields from: the compat adapter's ``resolved`` (from SGLang
    0.5.20 a record's fields keep the raw input and the resolution lives in its declarations). Imports SGLang."""
    from sglang_ddtree.compat import adapter

    return adapter().resolved(server_args)


def is_validated_ddtree_args(server_args: Any) -> bool:
    """DDTREE server args that already passed validation (the DDTREE fields are filled in)."""
    if server_args is None:
        return False
    server_args = resolved_args(server_args)
    return (
        is_ddtree(getattr(server_args, "speculative_algorithm", None))
        and getattr(server_args, "speculative_ddtree_budget", None) is not None
        and getattr(server_args, "speculative_ddtree_topk", None) is not None
        and getattr(server_args, "speculative_dflash_block_size", None) is not None
    )


@dataclasses.dataclass(frozen=True)
class DDTreeConfig:
    """What one DDTree round needs to know, fixed for the server's lifetime (all Python ints).

    budget:     draft-tree nodes per request (verify width is ``budget + 1`` with the root); with
                ``adaptive`` the largest budget a round may verify (every static shape is sized by it).
    topk:       max children per node (top-K draft tokens per block position); at most ``budget``.
    block_size: DFlash block size L of the drafter; the draft forward sees [bonus, mask x (L-1)].
    adaptive:   ``--speculative-ddtree-budget auto``: each round verifies one of ``buckets``.
    chain:      with ``adaptive``, ``buckets`` also holds the chain of ``max_depth`` drafts (``ChainBucket``); the
                worker sets it where that chain verifies more cheaply than a tree of its width
                (``worker.widths.with_chain``).
    """

    budget: int
    topk: int
    block_size: int
    adaptive: bool = False
    chain: bool = False

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
        if self.chain and not self.adaptive:
            raise ValueError("DDTreeConfig: a chain bucket needs budget auto (adaptive).")

    @property
    def num_verify_tokens(self) -> int:
        """N: tokens per request in the target's verify forward (the root plus every tree node)."""
        return self.budget + 1

    @property
    def buckets(self) -> tuple:
        """The budgets a round may verify, ascending: (budget,) for a fixed budget; with ``adaptive`` 0 (no
        drafting: the round is one target step committing the bonus token) and every 2^k - 1 up to the
        budget (``width_policy.bucket_budgets``); with ``chain`` also ``ChainBucket(max_depth)``, ordered by verify
        rows and before the tree of its width (an exact tie in the policy goes to the cheaper chain)."""
        if not self.adaptive:
            return (self.budget,)
        out = bucket_budgets(self.budget)
        if not self.chain or self.max_depth < 2:  # a chain of one draft is the tree of budget 1
            return out
        at = next((i for i, b in enumerate(out) if b >= self.max_depth), len(out))
        return out[:at] + (ChainBucket(self.max_depth),) + out[at:]

    def verifies_causally(self, bucket) -> bool:
        """Whether a round of ``bucket`` verifies on upstream's causal path, its verify backend and graphs built at
        top-K 1 (``worker.widths.VerifyWidths``): the chain bucket, and with ``chain`` also width 0 (the root alone,
        a chain of no drafts). Such a round writes no ancestor bits and no mask (``worker.chain_inputs``)."""
        return is_chain(bucket) or (self.chain and int(bucket) == 0)

    @property
    def max_depth(self) -> int:
        """D: deepest reachable node; one block position per level, never more levels than nodes."""
        return min(self.budget, self.block_size - 1)

    @property
    def draft_positions(self) -> int:
        """L - 1: the block positions the drafter scores per request (its [bs, L-1, K] top-K), whatever the budget;
        a budget below it reaches fewer levels (``max_depth``) but the tree build reads every position."""
        return self.block_size - 1

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
        server_args = resolved_args(server_args)
        budget = server_args.speculative_ddtree_budget
        largest = auto_largest_bucket(budget)
        adaptive = largest is not None
        return cls(
            budget=largest if adaptive else int(budget),
            topk=int(server_args.speculative_ddtree_topk),
            block_size=int(server_args.speculative_dflash_block_size),
            adaptive=adaptive,
        )
