"""The DDTREE flags as ``ServerArgs`` fields.

``DDTreeServerArgs`` is upstream's ``ServerArgs`` record plus two fields (a dataclass up to SGLang 0.5.19, a
msgspec Struct from 0.5.20: the compat adapter's ``server_args_record`` makes the class either). The plugin installs it
in place of ``sglang.srt.server_args.ServerArgs`` (and ``Engine.server_args_class``) with a class
REPLACE hook, so ``python -m sglang.launch_server --help`` lists the flags (upstream derives its CLI
from the record's fields) and ``sglang.Engine(..., speculative_ddtree_budget=...)`` accepts them.
Validation happens where upstream validates speculative arguments: ``DDTreeSpecAlgo.handle_server_args``
(see ``sglang_ddtree.validation``). Importing this module imports SGLang's server_args module.
"""

from __future__ import annotations

import logging
import sys
from typing import Optional, Union

from sglang.srt.arg_groups.arg_utils import A, Arg
from sglang.srt.server_args import ServerArgs

from sglang_ddtree.backends import TESTED_TARGET_ATTENTION_BACKENDS, default_target_backend, fa3_library_installed
from sglang_ddtree import compat
from sglang_ddtree.config import (
    AUTO,
    AUTO_DEFAULT_SCOPE,
    AUTO_MAX_BUDGET,
    DEFAULT_BUDGET,
    HYBRID_DEFAULT_BUDGET,
    DEFAULT_TOPK,
    DDTreeArgumentError,
    MAX_BUDGET,
    MAX_TOPK,
    MIN_BUDGET,
    MIN_TOPK,
    is_ddtree,
    parse_budget_arg,
)

logger = logging.getLogger(__name__)

# NOTE: keep no module-level alias of the upstream class beyond the base-class reference below:
# the hook registry rebinds every module attribute that points at the original ServerArgs.


@compat.adapter().server_args_record
class DDTreeServerArgs(ServerArgs):
    """Upstream ``ServerArgs`` plus the DDTREE flags (see the module docstring)."""

    speculative_ddtree_budget: A[
        Optional[Union[int, str]],
        Arg(
            help="DDTREE only. Number of draft-tree nodes verified per request and round (the root "
            "token is extra, so the target verifies budget + 1 tokens per request). Larger trees "
            "accept more tokens per round but cost more verify compute; the best value shrinks as "
            f"the batch grows. Range [{MIN_BUDGET}, {MAX_BUDGET}], or '{AUTO}': every round picks "
            f"the budget (0 = no drafting, 1, 3, 7, ... {AUTO_MAX_BUDGET}) with the most expected "
            f"tokens per second for the batch, from costs measured on this GPU ('{AUTO}:N': buckets up to N); "
            f"default '{AUTO}' at {AUTO_DEFAULT_SCOPE}, else {DEFAULT_BUDGET} ({HYBRID_DEFAULT_BUDGET} on hybrid "
            "Gated DeltaNet targets); the start-up log says which.",
            type_parser=parse_budget_arg,
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
        if is_ddtree(self.speculative_algorithm):
            self._ddtree_early_checks()
        else:
            for flag, value in (("--speculative-ddtree-budget", self.speculative_ddtree_budget),
                                ("--speculative-ddtree-topk", self.speculative_ddtree_topk)):
                if value is not None:
                    logger.warning("%s=%s has no effect without --speculative-algorithm DDTREE.", flag, value)
        super().__post_init__()

    def _ddtree_early_checks(self) -> None:
        """What must run before upstream's own ``__post_init__``: the drafter path check (upstream reads
        the drafter's config first and would fail with an unrelated Hugging Face error), and the
        attention backends. Records which backends the user asked for (upstream fills in a platform
        default before speculative validation runs, after which "asked for fa3" and "got fa3 by default"
        look the same), and picks a tested tree-verify backend when none was named."""
        from sglang_ddtree.drafter import check_dflash_drafter
        from sglang_ddtree.validation import reject_unsupported_requested_backends

        if self.speculative_draft_model_path is not None:
            check_dflash_drafter(self.speculative_draft_model_path)

        requested = (self.attention_backend, self.prefill_attention_backend, self.decode_attention_backend)
        reject_unsupported_requested_backends(requested)
        self._ddtree_requested_attention_backends = requested
        if all(b is None for b in requested):
            from sglang_ddtree.validation import _cuda_capability
            from sglang_ddtree.worker import fa3_tree

            from sglang_ddtree import hybrid_args

            if hybrid_args.local_target_is_hybrid(self.model_path):
                backend, why = hybrid_args.VERIFIED_ATTENTION_BACKEND, "a hybrid target: its GPU-verified tree verify"
            else:
                capability = _cuda_capability()
                backend, why = default_target_backend(capability, fa3_installed=fa3_library_installed,
                                                      fa3_fused=fa3_tree.enabled)
            self.attention_backend = backend
            logger.warning(
                "DDTREE: no --attention-backend given; using '%s' (%s; tree verify is tested with %s).",
                backend, why, ", ".join(TESTED_TARGET_ATTENTION_BACKENDS),
            )


def prepare_server_args_one_line_errors(original, argv):
    """AROUND hook of ``sglang.srt.server_args.prepare_server_args`` (the command-line path of
    ``launch_server`` / ``sglang serve``): a DDTREE configuration error is printed as one line, as
    argparse prints its own, and exits with status 2 instead of a traceback. Every other exception
    (upstream's own errors, genuine crashes) propagates unchanged; ``sglang.Engine`` never goes
    through here and gets the ``ValueError``. From SGLang 0.5.19 parsing no longer resolves (the launcher's
    ``run_server`` does, right after): a DDTREE configuration is resolved here, through the compat adapter, so
    that its validation still runs inside this hook."""
    from sglang_ddtree.compat import adapter

    try:
        server_args = original(argv)
        if is_ddtree(server_args.speculative_algorithm):
            adapter().resolve(server_args)  # 0.5.16-0.5.18: __post_init__ already resolved; nothing to do
        return server_args
    except DDTreeArgumentError as e:
        print(f"sglang: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
