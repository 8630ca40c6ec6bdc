"""The DDTREE flags as ``ServerArgs`` fields.

``DDTreeServerArgs`` is upstream's ``ServerArgs`` dataclass plus two fields. The plugin installs it
in place of ``sglang.srt.server_args.ServerArgs`` (and ``Engine.server_args_class``) with a class
REPLACE hook, so ``python -m sglang.launch_server --help`` lists the flags (upstream derives its CLI
from the dataclass fields) and ``sglang.Engine(..., speculative_ddtree_budget=...)`` accepts them.
Validation happens where upstream validates speculative arguments: ``DDTreeSpecAlgo.handle_server_args``
(see ``sglang_ddtree.validation``). Importing this module imports SGLang's server_args module.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional

from sglang.srt.arg_groups.arg_utils import A, Arg
from sglang.srt.server_args import ServerArgs

from sglang_ddtree.config import (
    ALGORITHM_NAME,
    DEFAULT_BUDGET,
    DEFAULT_TOPK,
    MAX_BUDGET,
    MAX_TOPK,
    MIN_BUDGET,
    MIN_TOPK,
)

logger = logging.getLogger(__name__)

# Target attention backends whose tree-mask verify path has been tested with DDTREE on a GPU.
TESTED_TARGET_ATTENTION_BACKENDS = ("triton", "flashinfer")
# Chosen for the target when the user names no attention backend at all.
DEFAULT_TARGET_ATTENTION_BACKEND = "triton"

# NOTE: keep no module-level alias of the upstream class beyond the base-class reference below:
# the hook registry rebinds every module attribute that points at the original ServerArgs.


@dataclasses.dataclass
class DDTreeServerArgs(ServerArgs):
    """Upstream ``ServerArgs`` plus the DDTREE flags (see the module docstring)."""

    speculative_ddtree_budget: A[
        Optional[int],
        Arg(
            help="DDTREE only. Number of draft-tree nodes verified per request and round (the root "
            "token is extra, so the target verifies budget + 1 tokens per request). Larger trees "
            "accept more tokens per round but cost more verify compute; the best value shrinks as "
            f"the batch grows. Range [{MIN_BUDGET}, {MAX_BUDGET}]; default {DEFAULT_BUDGET}.",
        ),
    ] = None
    speculative_ddtree_topk: A[
        Optional[int],
        Arg(
            help="DDTREE only. Maximum children per draft-tree node: the tree is grown from the "
            "drafter's top-k tokens at each position. Range "
            f"[{MIN_TOPK}, {MAX_TOPK}], at most the budget; default {DEFAULT_TOPK}.",
        ),
    ] = None

    def __post_init__(self):
        if _is_ddtree(self.speculative_algorithm):
            self._ddtree_prepare_attention_backend()
        else:
            for flag, value in (("--speculative-ddtree-budget", self.speculative_ddtree_budget),
                                ("--speculative-ddtree-topk", self.speculative_ddtree_topk)):
                if value is not None:
                    logger.warning("%s=%s has no effect without --speculative-algorithm DDTREE.", flag, value)
        super().__post_init__()

    def _ddtree_prepare_attention_backend(self) -> None:
        """Record which attention backends the user asked for (upstream fills in a platform default
        before speculative validation runs, after which "asked for fa3" and "got fa3 by default"
        look the same), and pick a tested tree-verify backend when none was named."""
        from sglang_ddtree.validation import reject_unsupported_requested_backends

        requested = (self.attention_backend, self.prefill_attention_backend, self.decode_attention_backend)
        reject_unsupported_requested_backends(requested)
        self._ddtree_requested_attention_backends = requested
        if all(b is None for b in requested):
            self.attention_backend = DEFAULT_TARGET_ATTENTION_BACKEND
            logger.warning(
                "DDTREE: no --attention-backend given; using '%s' (tree verify is tested with %s).",
                DEFAULT_TARGET_ATTENTION_BACKEND,
                ", ".join(TESTED_TARGET_ATTENTION_BACKENDS),
            )


def _is_ddtree(algorithm: Optional[str]) -> bool:
    return isinstance(algorithm, str) and algorithm.upper() == ALGORITHM_NAME
