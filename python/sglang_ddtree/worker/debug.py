"""Test and debugging knobs of the worker, read from the environment once at worker start-up.

SGLANG_DDTREE_TREE_IMPL:           "auto" (default), "package" or "stopgap": which tree builder to use.
SGLANG_DDTREE_TEST_REVERSE_RANKS:  "1" reverses the drafter's top-K token order at every position
                                   (log-probs stay sorted), so the tree favours the drafter's worst
                                   candidates and acceptance must walk past first children. Output
                                   must stay lossless; accept lengths drop. For tests only.
SGLANG_DDTREE_TEST_DRAFT_ORACLE:   path of a JSON file {"successor": [V ints], "seed": int}: replace the
                                   drafter's top-K by ``draft_oracle``'s plan built from the target's
                                   known continuation (targets whose next token is succ[current]
                                   only), to exercise every accept length and sibling walk. For tests only.
"""

from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass(frozen=True)
class WorkerKnobs:
    tree_impl: str = "auto"
    reverse_draft_ranks: bool = False
    draft_oracle_path: str = ""

    @classmethod
    def from_env(cls) -> "WorkerKnobs":
        impl = os.environ.get("SGLANG_DDTREE_TREE_IMPL", "auto").strip().lower() or "auto"
        if impl not in ("auto", "package", "stopgap"):
            raise ValueError(f"SGLANG_DDTREE_TREE_IMPL must be auto, package or stopgap, got {impl!r}.")
        reverse = os.environ.get("SGLANG_DDTREE_TEST_REVERSE_RANKS", "0").strip() in ("1", "true", "yes")
        oracle = os.environ.get("SGLANG_DDTREE_TEST_DRAFT_ORACLE", "").strip()
        if oracle and reverse:
            raise ValueError("SGLANG_DDTREE_TEST_DRAFT_ORACLE and SGLANG_DDTREE_TEST_REVERSE_RANKS exclude each other.")
        if oracle and not os.path.isfile(oracle):
            raise ValueError(f"SGLANG_DDTREE_TEST_DRAFT_ORACLE={oracle!r} is not a file.")
        return cls(tree_impl=impl, reverse_draft_ranks=reverse, draft_oracle_path=oracle)
