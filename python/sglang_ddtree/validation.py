"""Argument validation for ``--speculative-algorithm DDTREE`` and its mapping onto SGLang's fields.

Runs inside ``ServerArgs.__post_init__`` where upstream validates speculative arguments
(``handle_speculative_decoding`` -> ``DDTreeSpecAlgo.handle_server_args``), so a bad configuration
fails before any process or GPU memory is set up, with a ``ValueError`` that names the flag, the value
and what is allowed. Nothing is changed silently: every adjusted value logs one warning.

Mapping (DESIGN.md): the draft keeps DFLASH's block of size L; the target verifies ``budget + 1``
tokens per request with fan-out ``topk``:
    speculative_num_steps = 1, speculative_eagle_topk = topk,
    speculative_num_draft_tokens = budget + 1, speculative_dflash_block_size = L.
With ``--speculative-ddtree-budget auto`` the field keeps "auto" and every width-sized field is sized by the
largest bucket (``config.AUTO_MAX_BUDGET``); each round verifies one bucket (``worker.widths``). On a hybrid target
whose per-row states would not fit with that bucket, the field becomes "auto:N" (buckets up to N; logged), the
form a user may also give.
"""

from __future__ import annotations

import logging

from sglang_ddtree.backends import (
    TESTED_TARGET_ATTENTION_BACKENDS,
    UNSUPPORTED_TARGET_BACKENDS,
    arch_refusal,
    backends_for_capability,
    refusal_reason,
    tested_backends_text,
)
from sglang_ddtree.config import (
    AUTO,
    AUTO_DEFAULT_BACKENDS,
    AUTO_DEFAULT_SCOPE,
    AUTO_MAX_BUDGET,
    BUDGET_FLAG,
    DEFAULT_BUDGET,
    DEFAULT_TOPK,
    HYBRID_DEFAULT_BUDGET,
    TOPK_FLAG,
    DDTreeArgumentError,
    DDTreeConfig,
    auto_budget_value,
    auto_largest_bucket,
    check_budget,
    check_topk,
    env_switch,
)
from sglang_ddtree.hybrid_args import auto_largest_fitting_bucket
from sglang_ddtree.hybrid_args import check_server_args as check_hybrid_server_args
from sglang_ddtree.hybrid_args import check_release as check_hybrid_release

logger = logging.getLogger(__name__)

# The source DDTREE's resolved fields are recorded under (the declaration stash, from SGLang 0.5.19).
_SOURCE = "sglang_ddtree.validation.handle_ddtree_server_args"

# Native speculative fields DDTREE derives itself; setting them by hand is a conflict, not a hint.
_DERIVED_FIELDS = {
    "speculative_num_draft_tokens": f"derived as {BUDGET_FLAG} + 1",
    "speculative_eagle_topk": f"derived from {TOPK_FLAG}",
    "speculative_num_steps": "always 1 (one draft forward per round)",
}


def handle_ddtree_server_args(server_args) -> DDTreeConfig:
    """Validate DDTREE's configuration in place and map it onto the native fields.

    Returns the resulting ``DDTreeConfig`` (``DDTreeConfig.from_server_args`` derives the same one from
    the fields written here). Raises ``DDTreeArgumentError`` (a ``ValueError``) for any configuration
    DDTREE cannot honour yet.
    """
    _reject_hand_set_derived_fields(server_args)
    budget_given = getattr(server_args, "speculative_ddtree_budget", None) is not None
    # no budget given: auto where its GPU checks cover this configuration, else DEFAULT_BUDGET (logged below, once
    # the target is known to be dense; a hybrid target has its own default)
    default_why = None if budget_given else auto_default_unverified(server_args)
    default = AUTO if default_why is None else DEFAULT_BUDGET
    requested = check_budget(_value_or_default(server_args, "speculative_ddtree_budget", default), allow_auto=True)
    auto_largest = auto_largest_bucket(requested)  # None: a fixed budget
    budget = requested if auto_largest is None else auto_largest  # auto: the largest bucket sizes every shape
    topk = _topk_within(check_topk(_value_or_default(server_args, "speculative_ddtree_topk", DEFAULT_TOPK)), budget,
                        f"{BUDGET_FLAG}={budget}")
    from sglang.srt.arg_groups.overrides import resolved_view

    from sglang_ddtree.compat import adapter

    # Through the adapter: from 0.5.19 resolution is a declaration (what the config bags are projected from).
    adapter().resolve_fields(server_args, _SOURCE, {"speculative_ddtree_budget": requested,
                                                    "speculative_ddtree_topk": topk})

    _check_platform_and_parallelism(server_args)
    if auto_largest is not None and not adapter().budget_auto:
        raise DDTreeArgumentError(
            f"{BUDGET_FLAG} {AUTO} needs SGLang 0.5.16 for now (its per-width verify backends read the width "
            f"from the server args; from 0.5.17 backends read the process-wide get_spec()), installed family "
            f"{adapter().family}; use a fixed budget."
        )
    if auto_largest is not None and server_args.tp_size > 1 and not auto_tp_enabled():
        raise DDTreeArgumentError(
            f"{BUDGET_FLAG} {AUTO} with --tp-size {server_args.tp_size} is not yet verified on GPUs (the ranks agree "
            f"on every round's width, CPU-tested only); use a fixed budget, or set {AUTO_TP_ENV}=1 to try it."
        )
    _check_target_attention_backends(server_args)
    _check_unsupported_features(server_args)
    from sglang_ddtree.worker import admission, prefill

    admission.window_passes(error=DDTreeArgumentError)  # a malformed SGLANG_DDTREE_ADMIT_WAIT fails here, in one line
    prefill.enabled(error=DDTreeArgumentError)  # and a malformed SGLANG_DDTREE_PREFILL_ASYNC
    if server_args.speculative_draft_model_path is None:
        raise DDTreeArgumentError(
            "--speculative-algorithm DDTREE requires --speculative-draft-model-path "
            "(a DFlash drafter checkpoint for the target model)."
        )

    # The drafter is a DFlash drafter: let upstream's DFLASH handling resolve its block size (from
    # --speculative-dflash-block-size or the draft config), draft attention backend, and the
    # DFLASH-wide defaults (max running requests, mixed chunk off). It leaves the block size in
    # speculative_num_draft_tokens, which DDTREE then repurposes as the target verify width.
    from sglang.srt.arg_groups.speculative_hook import _handle_dflash

    _handle_dflash(server_args)
    block_size = int(resolved_view(server_args).speculative_num_draft_tokens)  # a declaration from 0.5.19

    hf_config = _target_hf_config(server_args)
    hybrid = hf_config is not None and is_hybrid_linear_attention(hf_config)
    fields = {"speculative_dflash_block_size": block_size, "speculative_num_steps": 1}
    if not budget_given and not hybrid:
        if default_why is None:
            logger.info("DDTREE: no %s given; using %s, the default here (each round verifies the budget with the "
                        "most expected tokens per second for its batch; a fixed budget: %s N).",
                        BUDGET_FLAG, AUTO, BUDGET_FLAG)
        else:
            logger.info("DDTREE: no %s given; using %d (the default is %s only at %s; here %s).", BUDGET_FLAG,
                        DEFAULT_BUDGET, AUTO, AUTO_DEFAULT_SCOPE, default_why)
    if hybrid and not budget_given:
        requested = budget = HYBRID_DEFAULT_BUDGET
        logger.info("DDTREE: no %s given; using %d on this hybrid target (every tree row keeps its own recurrent "
                    "state; dense targets default to %s or %d).", BUDGET_FLAG, budget, AUTO, DEFAULT_BUDGET)
        topk = _topk_within(topk, budget, f"this hybrid target's default {BUDGET_FLAG}={budget}")
        fields.update(speculative_ddtree_budget=requested, speculative_ddtree_topk=topk)
    elif hybrid and requested == AUTO:
        # plain auto on a hybrid target: its buckets stop where the per-row states still fit (max running requests
        # is known now, from _handle_dflash); "auto:N" the user gave is checked as given (check_hybrid_server_args)
        fit = auto_largest_fitting_bucket(server_args)
        if fit is not None and 1 <= fit[0] < budget:
            requested, budget = auto_budget_value(fit[0]), fit[0]
            logger.warning(
                "DDTREE: %s %s on this hybrid target verifies buckets up to %d (%s=%s): every tree row keeps its own "
                "recurrent state, %s; give %s %s:N (N <= %d) or fewer --max-running-requests to change it.",
                BUDGET_FLAG, AUTO, budget, BUDGET_FLAG, requested, fit[1], BUDGET_FLAG, AUTO, AUTO_MAX_BUDGET)
            topk = _topk_within(topk, budget, f"budget {AUTO}'s largest bucket {budget} here")
            fields.update(speculative_ddtree_budget=requested, speculative_ddtree_topk=topk)
    fields.update(speculative_eagle_topk=topk, speculative_num_draft_tokens=budget + 1)
    if not hybrid:  # dense targets: where they ran (a hybrid target's prefill also writes its recurrent states)
        fields.update(_prefill_graphs_from_one_token(server_args))
    adapter().resolve_fields(server_args, _SOURCE, fields)
    config = DDTreeConfig.from_server_args(server_args)
    if hybrid:  # release checked (_check_unsupported_features)
        # its own page-size rule (PAGED_ENV beyond its verified configuration) and verified-configuration rule;
        # with budget auto the per-row states are sized (and checked) for its largest bucket, which every narrower
        # bucket's verify reuses (worker/hybrid.py)
        check_hybrid_server_args(server_args, config)
    else:
        _check_page_size(server_args, adaptive=config.adaptive)
    logger.info(
        "DDTREE: budget=%s topk=%d drafter block size=%d (tree depth <= %d, verify width %s tokens/request).",
        f"auto (buckets {list(config.buckets)})" if config.adaptive else budget, topk, block_size,
        config.max_depth, f"<= {config.num_verify_tokens}" if config.adaptive else config.num_verify_tokens,
    )
    _log_flashinfer_plan(server_args)
    return config


# The target's prefill CUDA graphs DDTREE adds below upstream's smallest (SGLang captures prefill graphs from 4 tokens
# and replays one only where padding at most doubles a batch, so a 1-token prefill runs eagerly), on dense targets
# with the attention backends a GPU ran them on (H100: triton, session 46, 1.081x auto in a paired A/B; fa3, sessions
# 48-49: sharp parity exact and every fa3 speed cell, with and without them not yet paired on fa3; flashinfer keeps
# upstream's list until it has run there).
SMALL_PREFILL_GRAPH_TOKENS = (1, 2)
SMALL_PREFILL_GRAPH_BACKENDS = ("triton", "fa3")


def _prefill_graphs_from_one_token(server_args) -> dict:
    """``{"cuda_graph_config": ...}`` with ``SMALL_PREFILL_GRAPH_TOKENS`` in front of the target's breakable prefill
    graph sizes upstream chose, or ``{}`` where the user named the sizes (``--cuda-graph-bs-prefill``), prefill graphs
    are another graph backend or off, the target's prefill attention backend is not one of
    ``SMALL_PREFILL_GRAPH_BACKENDS``, or the sizes already start there. Why: a speculative engine's requests end on
    different rounds, so each successor is admitted alone; where the radix cache holds its prompt but the last token,
    its whole prefill is 1 token, which upstream runs eagerly (session 45: ~400 of ~650 prefill batches of a
    one-length tiny-pair run, against 10 of autoregressive decoding's; session 46: with these graphs none ran
    eagerly and budget auto ran 1.08x faster there, paired)."""
    import dataclasses

    from sglang.srt.arg_groups.overrides import attention_backends_of, resolved_view
    from sglang.srt.model_executor.cuda_graph_config import Backend, Phase

    if (Phase.PREFILL, "bs") in getattr(server_args, "_cuda_graph_config_locked", ()):
        return {}
    view = resolved_view(server_args)
    if attention_backends_of(view)[0] not in SMALL_PREFILL_GRAPH_BACKENDS:
        return {}
    config = view.cuda_graph_config
    sizes = config.prefill.bs
    if config.prefill.backend != Backend.BREAKABLE or not sizes:
        return {}
    added = [s for s in SMALL_PREFILL_GRAPH_TOKENS if s < min(sizes)]
    if not added:
        return {}
    logger.info("DDTREE: the target's prefill CUDA graphs also at %s token(s), below upstream's %d..%d (a prefill of "
                "a request the radix cache holds but its last token replays a graph instead of running eagerly); "
                "--cuda-graph-bs-prefill chooses them.", added, min(sizes), max(sizes))
    prefill = dataclasses.replace(config.prefill, bs=added + list(sizes))
    return {"cuda_graph_config": dataclasses.replace(config, prefill=prefill)}


def _log_flashinfer_plan(server_args) -> None:
    """On a flashinfer target, say which plan its graph replays use (``worker.flashinfer_plan``: the default
    depends on the installed FlashInfer, so the log says it rather than leaving the user to guess)."""
    from sglang.srt.arg_groups.overrides import attention_backends_of, resolved_view

    if "flashinfer" in attention_backends_of(resolved_view(server_args)):
        from sglang_ddtree.worker import flashinfer_plan

        logger.info(flashinfer_plan.describe())


def _topk_within(topk: int, budget: int, which: str) -> int:
    """``topk``, or ``budget`` (with one warning) where it exceeds it: a node has at most ``budget`` children."""
    if topk > budget:
        logger.warning("DDTREE: %s=%d exceeds %s; a node can have at most %d children, using %s=%d.",
                       TOPK_FLAG, topk, which, budget, TOPK_FLAG, budget)
        return budget
    return topk


def _value_or_default(server_args, name: str, default: int):
    value = getattr(server_args, name, None)
    return default if value is None else value


def _reject_hand_set_derived_fields(server_args) -> None:
    for name, how in _DERIVED_FIELDS.items():
        value = getattr(server_args, name)
        if value is not None:
            flag = "--" + name.replace("_", "-")
            raise DDTreeArgumentError(
                f"{flag}={value} cannot be set with --speculative-algorithm DDTREE: it is {how}. "
                f"Use {BUDGET_FLAG} and {TOPK_FLAG} instead."
            )


def _check_platform_and_parallelism(server_args) -> None:
    from sglang.srt.arg_groups.overrides import resolved_view

    view = resolved_view(server_args)  # what resolution decided so far (from 0.5.19 the fields stay raw)
    if not str(view.device).startswith("cuda"):
        raise DDTreeArgumentError(
            f"--speculative-algorithm DDTREE runs on CUDA GPUs only, got --device {view.device}."
        )
    if view.pp_size != 1:
        raise DDTreeArgumentError(
            f"--speculative-algorithm DDTREE does not support pipeline parallelism yet: "
            f"--pp-size must be 1, got {view.pp_size}."
        )
    from sglang_ddtree.compat import adapter

    dp_flag = adapter().attention_dp_flag(view)  # --attn-dp-size N from 0.5.22
    if dp_flag is not None:
        raise DDTreeArgumentError(f"--speculative-algorithm DDTREE does not support {dp_flag} yet.")


def auto_default_unverified(server_args):
    """Why budget auto is not the default for this configuration (``AUTO_DEFAULT_SCOPE``), or None where it is."""
    from sglang.srt.arg_groups.overrides import attention_backends_of, resolved_view

    from sglang_ddtree.compat import adapter
    from sglang_ddtree.worker import fa3_tree

    if not adapter().budget_auto:
        return f"SGLang release family {adapter().family}"
    view = resolved_view(server_args)
    if view.tp_size > 1:
        return f"--tp-size {view.tp_size}"
    if view.page_size is not None and view.page_size > 1:
        return f"--page-size {view.page_size}"
    prefill, decode = attention_backends_of(view)
    for flag, backend in (("prefill", prefill), ("decode", decode)):
        if backend not in AUTO_DEFAULT_BACKENDS:
            return f"the {flag} attention backend is '{backend}'"
    if "fa3" in (prefill, decode) and not fa3_tree.enabled():
        return f"fa3 verifies trees with upstream's cascade ({fa3_tree.ENV} off or not carried by this release)"
    return None


AUTO_TP_ENV = "SGLANG_DDTREE_EXPERIMENTAL_AUTO_TP"


def auto_tp_enabled() -> bool:
    """``SGLANG_DDTREE_EXPERIMENTAL_AUTO_TP=1``: budget auto under tensor parallelism, where every rank must choose
    the same width every round (``widths.AutoWidth``'s ``agree``: the ranks read rounds at a fixed lag and agree on
    their mean costs); experimental until ``bash scripts/device/tp2.sh`` has run it on two GPUs."""
    return env_switch(AUTO_TP_ENV, on="budget auto with --tp-size > 1 (experimental)",
                      off="budget auto at --tp-size 1 only", error=DDTreeArgumentError)


PAGED_ENV = "SGLANG_DDTREE_EXPERIMENTAL_PAGED"
# --page-size > 1 as verified on a GPU (H200, SGLang 0.5.16), dense targets (hybrid ones: ``hybrid_args``), a fixed
# budget, one backend for the target's prefill and decode and the drafter (the drafter's unset or the same):
# - fa3 with DDTREE's fused tree attention: ``test_worker_gpu.py::test_paged_kv_is_token_identical_to_page_size_1``,
#   page 16 / 64, budgets 15 / 64, graphs and overlap on and off, token-identical to the page-1 plain engine
#   (session 13, ``benchmark/results/gpu_tests_h200_session13.json`` call 7);
# - triton and flashinfer: the same sharp-fixture test, 176 / 176 equal (session 20,
#   ``benchmark/results/session20/hybrid_left/paged_*.parity.txt``), and the trained pair's
#   ``test_paged_pair_gpu.py``: every divergence from the page-1 plain engine a float32 top-2 near-tie, acceptance
#   kept (session 25, ``benchmark/results/session25/paged_pair``);
# - all three: the trained pair's test (its bookkeeping fixed) passed on fa3, triton and flashinfer in session 26
#   (``benchmark/results/session26/paged_pair_*``).
PAGED_VERIFIED_BACKENDS = ("fa3", "triton", "flashinfer")


def paged_kv_enabled() -> bool:
    """``SGLANG_DDTREE_EXPERIMENTAL_PAGED=1``: DDTREE accepts ``--page-size`` > 1 beyond the verified configurations
    (``_check_page_size``): dense targets with mixed backends, fa3 with upstream's cascade, budget auto. Every slot
    the round touches is a per-token index read from ``req_to_token`` (verify, commit moves, draft block, draft-KV
    append) and upstream's ``alloc_for_spec_decode`` reserves whole pages, so nothing in the round assumes
    one-token pages; experimental until a paged parity has run there on a GPU."""
    return env_switch(PAGED_ENV, on="--page-size > 1 allowed beyond the GPU-verified configurations (experimental)",
                      off="--page-size > 1 with a fixed budget on one of fa3 / triton / flashinfer only",
                      error=DDTreeArgumentError)


def _paged_unverified_reason(server_args, *, adaptive: bool):
    """Why this configuration's ``--page-size`` > 1 is outside what a GPU verified (``PAGED_VERIFIED_BACKENDS``),
    or None when it is inside."""
    from sglang.srt.arg_groups.overrides import attention_backends_of, resolved_view

    from sglang_ddtree.worker import fa3_tree

    prefill, decode = attention_backends_of(resolved_view(server_args))
    for flag, backend in (("prefill", prefill), ("decode", decode)):
        if backend not in PAGED_VERIFIED_BACKENDS:
            return f"the {flag} attention backend is '{backend}'"
    if prefill != decode:
        return f"the prefill and decode attention backends differ ('{prefill}', '{decode}')"
    draft = getattr(server_args, "speculative_draft_attention_backend", None)
    if draft not in (None, prefill):
        return f"--speculative-draft-attention-backend is '{draft}' (the target's is '{prefill}')"
    if prefill == "fa3" and not fa3_tree.enabled():
        return f"fa3 verifies trees with upstream's cascade here ({fa3_tree.ENV} off or not carried by this release)"
    if adaptive:
        return f"{BUDGET_FLAG} is {AUTO}"
    return None


def _check_page_size(server_args, *, adaptive: bool) -> None:
    """``--page-size`` > 1 on a dense target: taken in a GPU-verified configuration, or anywhere with
    ``PAGED_ENV``=1 (hybrid targets: ``hybrid_args``)."""
    from sglang.srt.arg_groups.overrides import resolved_view

    page_size = resolved_view(server_args).page_size
    if page_size is None or page_size <= 1 or paged_kv_enabled():
        return
    why = _paged_unverified_reason(server_args, adaptive=adaptive)
    if why is not None:
        raise DDTreeArgumentError(
            f"--speculative-algorithm DDTREE supports --page-size {page_size} only with a fixed budget and one "
            f"--attention-backend of {' / '.join(PAGED_VERIFIED_BACKENDS)} for the target and the drafter for now, "
            f"but {why} (use --page-size 1, or set {PAGED_ENV}=1 to try it: not yet verified on a GPU)."
        )


def _check_target_attention_backends(server_args) -> None:
    """The target's prefill and decode backends both serve the tree verify; each must be tested, and each
    (with a drafter backend the user named) must run on this GPU's architecture (fa3: not on Blackwell)."""
    from sglang.srt.arg_groups.overrides import attention_backends_of, resolved_view

    prefill, decode = attention_backends_of(resolved_view(server_args))
    for flag, backend in (("prefill", prefill), ("decode", decode)):
        if backend is None or backend in TESTED_TARGET_ATTENTION_BACKENDS:
            continue
        raise DDTreeArgumentError(
            f"--speculative-algorithm DDTREE cannot use the {flag} attention backend '{backend}'"
            f"{_backend_origin(server_args, flag, backend)}: {refusal_reason(backend)}. Use "
            f"--attention-backend {tested_backends_text()}."
        )
    capability = _cuda_capability()
    draft = getattr(server_args, "speculative_draft_attention_backend", None)
    for what, backend in (("prefill", prefill), ("decode", decode), ("draft", draft)):
        why = arch_refusal(backend, capability) if backend is not None else None
        if why is not None:
            usable = backends_for_capability(capability)
            flag = "--speculative-draft-attention-backend" if what == "draft" else "--attention-backend"
            raise DDTreeArgumentError(
                f"--speculative-algorithm DDTREE cannot use the {what} attention backend '{backend}' on this GPU: "
                f"{why}. Use {flag} {' or '.join(usable)}."
            )


def _cuda_capability():
    """(major, minor) of GPU 0 as torch sees it, or None without a visible CUDA GPU (then no arch check)."""
    try:
        import torch

        if torch.cuda.is_available():
            return tuple(torch.cuda.get_device_capability(0))
    except Exception:  # noqa: BLE001 - a broken CUDA set-up is the doctor's business, not validation's
        return None
    return None


def _backend_origin(server_args, flag: str, backend: str) -> str:
    """Say whether the user named ``backend`` or SGLang filled it in (see DDTreeServerArgs)."""
    requested = getattr(server_args, "_ddtree_requested_attention_backends", None)
    if requested is None:
        return ""
    base, prefill, decode = requested
    named = (prefill or base) if flag == "prefill" else (decode or base)
    if named == backend:
        return f" (from --{flag}-attention-backend)" if named != base else " (from --attention-backend)"
    return " (SGLang's default on this platform)"


def reject_unsupported_requested_backends(requested) -> None:
    """Refuse backends that can never run a tree verify as soon as the user names them, before
    upstream's own platform checks (which would report an unrelated reason first)."""
    flags = ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend")
    for flag, backend in zip(flags, requested):
        if backend in UNSUPPORTED_TARGET_BACKENDS:
            raise DDTreeArgumentError(
                f"--speculative-algorithm DDTREE cannot use {flag} {backend}: "
                f"{UNSUPPORTED_TARGET_BACKENDS[backend]}. Use --attention-backend {tested_backends_text()}."
            )


def _check_unsupported_features(server_args) -> None:
    if server_args.speculative_draft_window_size is not None:
        raise DDTreeArgumentError(
            "--speculative-draft-window-size is not supported with --speculative-algorithm DDTREE yet, "
            f"got {server_args.speculative_draft_window_size}."
        )
    if getattr(server_args, "speculative_adaptive", False):
        raise DDTreeArgumentError("--speculative-adaptive is not supported with --speculative-algorithm DDTREE yet.")
    mode = getattr(server_args, "disaggregation_mode", "null")
    if mode not in (None, "null"):
        raise DDTreeArgumentError(
            f"--speculative-algorithm DDTREE does not support PD disaggregation yet, got "
            f"--disaggregation-mode {mode}."
        )
    from sglang.srt.model_executor.cuda_graph_config import Backend

    if getattr(server_args, "cuda_graph_backend_prefill", None) == Backend.FULL:
        # upstream's full prefill graph returns only the last hidden states, not the target layers' the drafter needs:
        # every engine's first prefill failed in the model's forward (SGLang 0.5.16, H100, session 49)
        raise DDTreeArgumentError(
            "--cuda-graph-backend-prefill full is not supported with --speculative-algorithm DDTREE: its prefill "
            "graphs drop the target's captured hidden states the drafter reads; use breakable (the default), "
            "tc_piecewise or disabled.")
    _check_release_features()
    hf_config = _target_hf_config(server_args)
    if hf_config is not None and is_hybrid_linear_attention(hf_config):
        check_hybrid_release((getattr(hf_config, "architectures", None) or ["?"])[0])


def _check_release_features() -> None:
    """Features the installed SGLang release cannot carry (``compat`` adapter's ``refused_features``)."""
    from sglang_ddtree.compat import adapter
    from sglang_ddtree.worker import fa3_tree

    why = adapter().refused_features().get(fa3_tree.ENV)
    if why is not None and fa3_tree.explicitly_enabled():
        raise DDTreeArgumentError(
            f"{fa3_tree.ENV}=1 is not supported with --speculative-algorithm DDTREE on sglang {adapter().version}: "
            f"{why}; unset it (fa3 then verifies trees with upstream's cascade).")
    from sglang_ddtree.worker import flashinfer_plan

    if flashinfer_plan.explicitly_enabled() and not flashinfer_plan.flashinfer_tested():
        raise DDTreeArgumentError(
            f"{flashinfer_plan.ENV}=1 needs flashinfer-python {' or '.join(flashinfer_plan.TESTED_FLASHINFER)} "
            f"(installed: {flashinfer_plan.installed_flashinfer() or 'none'}); unset it (flashinfer then plans "
            f"with upstream's plan()).")


# Config keys that only hybrid linear-attention (Mamba / GDN) models carry.
_HYBRID_CONFIG_KEYS = ("mamba_d_state", "mamba_n_heads", "ssm_state_size", "linear_num_value_heads",
                       "hybrid_override_pattern", "linear_conv_kernel_dim")
_HYBRID_LAYER_TYPES = ("linear_attention", "mamba", "mamba2")


def is_hybrid_linear_attention(hf_config) -> bool:
    """Whether the target mixes softmax attention with linear attention / SSM layers."""
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    if any(getattr(text, key, None) is not None for key in _HYBRID_CONFIG_KEYS):
        return True
    layer_types = getattr(text, "layer_types", None) or ()
    return any(t in _HYBRID_LAYER_TYPES for t in layer_types)


def _target_hf_config(server_args):
    """The target's HF config, as upstream already loaded it (None if it could not be read)."""
    try:
        from sglang_ddtree.compat import adapter

        return adapter().target_model_config(server_args).hf_config
    except Exception as e:  # a model path upstream could not read fails later with its own error
        logger.debug("DDTREE: could not read the target config for validation: %s", e)
        return None
