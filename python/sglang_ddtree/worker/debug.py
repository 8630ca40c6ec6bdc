"""Test and debugging knobs of the worker, read from the environment once at worker start-up.

SGLANG_DDTREE_TEST_REVERSE_RANKS:  "1" reverses the drafter's top-K token order at every position
                                   (log-probs stay sorted), so the tree favours the drafter's worst
                                   candidates and acceptance must walk past first children. Output
                                   must stay lossless; accept lengths drop. For tests only.
SGLANG_DDTREE_TEST_DRAFT_ORACLE:   path of a JSON file {"successor": [V ints], "seed": int}: replace the
                                   drafter's top-K by ``draft_oracle``'s plan built from the target's
                                   known continuation (targets whose next token is succ[current]
                                   only), to exercise every accept length and sibling walk. For tests only.
SGLANG_DDTREE_TREE_IMPL was removed with the worker's stop-gap tree builder (the tree package is the
only builder); set to anything, it stops the worker at start-up rather than being silently ignored.
"""

from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass(frozen=True)
class WorkerKnobs:
    reverse_draft_ranks: bool = False
    draft_oracle_path: str = ""

    @classmethod
    def from_env(cls) -> "WorkerKnobs":
        removed = os.environ.get("SGLANG_DDTREE_TREE_IMPL", "").strip()
        if removed:
            raise ValueError(f"SGLANG_DDTREE_TREE_IMPL={removed!r}: this knob was removed together with the "
                             "stop-gap tree builder; the worker always uses sglang_ddtree.tree. Unset it.")
        reverse = os.environ.get("SGLANG_DDTREE_TEST_REVERSE_RANKS", "0").strip() in ("1", "true", "yes")
        oracle = os.environ.get("SGLANG_DDTREE_TEST_DRAFT_ORACLE", "").strip()
        if oracle and reverse:
            raise ValueError("SGLANG_DDTREE_TEST_DRAFT_ORACLE and SGLANG_DDTREE_TEST_REVERSE_RANKS exclude each other.")
        if oracle and not os.path.isfile(oracle):
            raise ValueError(f"SGLANG_DDTREE_TEST_DRAFT_ORACLE={oracle!r} is not a file.")
        return cls(reverse_draft_ranks=reverse, draft_oracle_path=oracle)
