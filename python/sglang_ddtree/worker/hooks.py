"""Hooks into upstream runners that a DDTREE target needs (VERIFY step under CUDA graphs; KV sizing).

- ``DecodeCudaGraphRunner.get_spec_info`` and ``spec_info.create_dummy_verify_input``: upstream's
  DFLASH-family dummy carries no custom mask for triton / flashinfer, so the target-verify graphs
  would be captured with causal attention and ignore the tree mask at replay. For the DDTREE target
  runner the dummy carries the runner's mask buffer, so the graphs of every captured batch size read a
  tree mask of width budget + 1. The draft runner (block size L, no mask) keeps upstream's dummy.
- ``allocation_sizing.get_alloc_len_per_decode`` / ``get_req_to_token_extra_context_len``: the
  scheduler's memory estimate and the req_to_token row headroom must cover DDTree's per-round
  reservation (``DDTreeConfig.reserve_per_decode``), which exceeds 2 * (budget + 1) when
  budget + 1 < L.
- Observability (``metrics``): the scheduler's decode-result and decode-log functions and the
  tokenizer's per-request spec metrics, for DDTREE's accept rate and accept-length histogram.
- ``dflash_utils.validate_dflash_request``: DDTREE's per-request refusals (``request_checks``).
- ``FlashAttentionBackend.forward_extend`` / ``init_cuda_graph_state`` / ``_apply_cuda_graph_metadata``: fa3's
  tree verify through DDTREE's
  fused tree-attention kernel (``fa3_tree``); registered when that path is on (``fa3_tree.enabled``:
  ``SGLANG_DDTREE_FA3_TREE_ATTENTION`` unset or 1, on a release that carries it) and sgl_kernel's FA3 library is
  installed (elsewhere the fa3 backend is never imported for them). In a process that serves no DDTREE verify they
  pass straight through to upstream (one type check per call: ``fa3_tree.backend_serves_ddtree``, the verify input's
  type); ``SGLANG_DDTREE_FA3_TREE_ATTENTION=0`` keeps them out entirely.
- ``FlashInferIndicesUpdaterPrefill.call_begin_forward``: DDTREE's host-sync-free plan of its flashinfer graph
  replays (``flashinfer_plan``); registered when flashinfer is installed and the plan is on
  (``SGLANG_DDTREE_FLASHINFER_PLAN`` unset with the FlashInfer it was written against, or 1); every other call passes
  straight through.
- ``MinFreeSlotsDelayer.should_delay``: DDTREE's admission window (``admission``, experimental); registered only
  when ``SGLANG_DDTREE_ADMIT_WAIT`` asks for one, and then a pass-through on servers other than DDTREE.
``install_hooks()`` only registers (cheap, idempotent); SGLang's ``load_plugins`` applies them.
"""

from __future__ import annotations

import logging

from sglang_ddtree.config import DDTreeConfig, is_ddtree, is_validated_ddtree_args
from sglang_ddtree.worker import metrics, request_checks

logger = logging.getLogger(__name__)

_installed = False

_RUNNER = "sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner.get_spec_info"
_DUMMY = "sglang.srt.speculative.spec_info.create_dummy_verify_input"
_ALLOC_LEN = "sglang.srt.mem_cache.allocation_sizing.get_alloc_len_per_decode"
_EXTRA_CTX = "sglang.srt.mem_cache.allocation_sizing.get_req_to_token_extra_context_len"
_RESOLVE = ("sglang.srt.managers.scheduler_components.batch_result_processor."
            "SchedulerBatchResultProcessor._resolve_spec_v2_tokens")
_DECODE_LOG = ("sglang.srt.managers.scheduler_components.metrics_reporter."
               "SchedulerMetricsReporter.report_decode_stats")
_REQ_METRICS = "sglang.srt.managers.tokenizer_manager.TokenizerManager._calculate_spec_decoding_metrics"
_VALIDATE_REQ = "sglang.srt.speculative.dflash_utils.validate_dflash_request"


def runner_get_spec_info(original, runner, num_tokens):
    mr = runner.model_runner
    if mr.is_draft_worker or not is_ddtree(mr.spec_algorithm):
        return original(runner, num_tokens)
    from sglang_ddtree.worker.info import make_capture_verify_input

    return make_capture_verify_input(
        DDTreeConfig.from_server_args(mr.server_args), num_tokens_per_req=runner.captured_req_width,
        custom_mask=runner.buffers.custom_mask,
    )


def create_dummy_verify_input(original, spec_algorithm, server_args, custom_mask, num_tokens_per_req,
                              is_draft_worker):
    if is_draft_worker or not is_ddtree(spec_algorithm):
        return original(spec_algorithm, server_args, custom_mask, num_tokens_per_req, is_draft_worker)
    from sglang_ddtree.worker.info import make_capture_verify_input

    return make_capture_verify_input(
        DDTreeConfig.from_server_args(server_args), num_tokens_per_req=num_tokens_per_req,
        custom_mask=custom_mask,
    )


def alloc_len_per_decode(original, server_args=None):
    value = original(server_args)
    if server_args is None:
        from sglang.srt.runtime_context import get_server_args

        server_args = get_server_args()
    if not is_validated_ddtree_args(server_args):
        return value
    # Callers reserve 2x this (overlap double buffer); DDTree's reservation is reserve_per_decode.
    return max(value, -(-DDTreeConfig.from_server_args(server_args).reserve_per_decode // 2))


def req_to_token_extra_context_len(original, server_args):
    value = original(server_args)
    if not is_validated_ddtree_args(server_args):
        return value
    return max(value, 4 + DDTreeConfig.from_server_args(server_args).reserve_per_decode)


# Upstream function -> our AROUND hook (sglang_ddtree.compat lists the targets for the doctor).
HOOK_TARGETS = {
    _RUNNER: runner_get_spec_info,
    _DUMMY: create_dummy_verify_input,
    _ALLOC_LEN: alloc_len_per_decode,
    _EXTRA_CTX: req_to_token_extra_context_len,
    _RESOLVE: metrics.resolve_spec_v2_tokens,
    _DECODE_LOG: metrics.report_decode_stats,
    _REQ_METRICS: metrics.tokenizer_spec_metrics,
    _VALIDATE_REQ: request_checks.validate_dflash_request,
}


def fa3_forward_extend(original, backend, *args, **kwargs):
    from sglang_ddtree.worker import fa3_tree

    return fa3_tree.forward_extend(original, backend, *args, **kwargs)


def fa3_init_cuda_graph_state(original, backend, *args, **kwargs):
    from sglang_ddtree.worker import fa3_tree

    return fa3_tree.init_cuda_graph_state(original, backend, *args, **kwargs)


def fa3_apply_cuda_graph_metadata(original, backend, *args, **kwargs):
    from sglang_ddtree.worker import fa3_tree

    return fa3_tree.apply_cuda_graph_metadata(original, backend, *args, **kwargs)


_FA3 = "sglang.srt.layers.attention.flashattention_backend.FlashAttentionBackend"
# Registered on demand (see the module docstring and fa3_hook_targets).
FA3_HOOK_TARGETS = {
    f"{_FA3}.forward_extend": fa3_forward_extend,
    f"{_FA3}.init_cuda_graph_state": fa3_init_cuda_graph_state,
    f"{_FA3}._apply_cuda_graph_metadata": fa3_apply_cuda_graph_metadata,
}


def fa3_hook_targets() -> dict:
    """FA3_HOOK_TARGETS when fa3's fused tree attention is switched on and fa3 can run here, else {}."""
    from sglang_ddtree.backends import fa3_library_installed
    from sglang_ddtree.worker import fa3_tree  # imports neither torch nor SGLang at module level

    return dict(FA3_HOOK_TARGETS) if fa3_tree.enabled() and fa3_library_installed() else {}


_FI_PREFILL = "sglang.srt.layers.attention.flashinfer_backend.FlashInferIndicesUpdaterPrefill"


def flashinfer_call_begin_forward(original, updater, *args, **kwargs):
    from sglang_ddtree.worker import flashinfer_plan

    return flashinfer_plan.call_begin_forward(original, updater, *args, **kwargs)


# Registered on demand (flashinfer_hook_targets): DDTREE's host-sync-free plan of flashinfer graph replays.
FLASHINFER_HOOK_TARGETS = {f"{_FI_PREFILL}.call_begin_forward": flashinfer_call_begin_forward}


def flashinfer_hook_targets() -> dict:
    """FLASHINFER_HOOK_TARGETS when the sync-free plan is on (``flashinfer_plan.enabled``) and flashinfer is
    installed, else {}."""
    import importlib.util

    from sglang_ddtree.worker import flashinfer_plan

    return (dict(FLASHINFER_HOOK_TARGETS)
            if flashinfer_plan.enabled() and importlib.util.find_spec("flashinfer") is not None else {})


_DELAYER = "sglang.srt.managers.min_free_slots_delayer.MinFreeSlotsDelayer"


def admission_should_delay(original, delayer, **kwargs):
    from sglang_ddtree.worker import admission

    return admission.should_delay(original, delayer, **kwargs)


# Registered unless the window is off (admission_hook_targets): the admission window (on by default).
ADMISSION_HOOK_TARGETS = {f"{_DELAYER}.should_delay": admission_should_delay}


def admission_hook_targets() -> dict:
    """ADMISSION_HOOK_TARGETS unless ``SGLANG_DDTREE_ADMIT_WAIT=0`` turns the window off (unset: the default window),
    else {} (a malformed value too: the server's validation refuses it in one line)."""
    from sglang_ddtree.worker import admission

    try:
        return dict(ADMISSION_HOOK_TARGETS) if admission.window_passes() else {}
    except ValueError:
        return {}


def install_hooks() -> None:
    """Register the hooks above with SGLang's HookRegistry (idempotent, imports nothing heavy)."""
    global _installed
    if _installed:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from sglang_ddtree.compat import adapter

    targets = {**HOOK_TARGETS, **fa3_hook_targets(), **flashinfer_hook_targets(), **admission_hook_targets()}
    for target, hook in targets.items():
        HookRegistry.register(target, adapter().adapt_hook(target, hook), HookType.AROUND)
    _installed = True
