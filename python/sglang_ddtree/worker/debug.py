"""Test and debugging knobs of the worker, read from the environment once at worker start-up.

SGLANG_DDTREE_TREE_IMPL:           "auto" (default), "package" or "stopgap": which tree builder to use.
SGLANG_DDTREE_TEST_REVERSE_RANKS:  "1" reverses the drafter's top-K token order at every position
                                   (log-probs stay sorted), so the tree favours the drafter's worst
                                   candidates and acceptance must walk past first children. Output
                                   must stay lossless; accept lengths drop. For tests only.
"""

from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass(frozen=True)
class WorkerKnobs:
    tree_impl: str = "auto"
    reverse_draft_ranks: bool = False

    @classmethod
    def from_env(cls) -> "WorkerKnobs":
        impl = os.environ.get("SGLANG_DDTREE_TREE_IMPL", "auto").strip().lower() or "auto"
        if impl not in ("auto", "package", "stopgap"):
            raise ValueError(f"SGLANG_DDTREE_TREE_IMPL must be auto, package or stopgap, got {impl!r}.")
        reverse = os.environ.get("SGLANG_DDTREE_TEST_REVERSE_RANKS", "0").strip() in ("1", "true", "yes")
        return cls(tree_impl=impl, reverse_draft_ranks=reverse)
