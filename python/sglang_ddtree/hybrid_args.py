"""Argument-time rules for DDTREE on hybrid Mamba/GDN targets (Qwen3.5 / Qwen3.6 / Qwen3-Next).

Serves validation, before any process or GPU memory exists: whether a hybrid target may run at all (SGLang 0.5.16,
whose hybrid backend the state commit was verified against), whether the configuration is the GPU-verified one
(the target and drafter on triton, tp 1) or the experimental switch ``SGLANG_DDTREE_EXPERIMENTAL_HYBRID=1`` lets
it through beyond that, which
SGLang settings a hybrid tree verify needs (a Gated DeltaNet target, the recurrent verify rather than
ReplaySSM, the mamba radix strategies that work with speculative decoding), and whether the per-node verify
states of the configured budget fit on the GPU: a tree verify keeps one conv + SSM state per tree row and
request, ``budget + 1`` rows, sized for ``--max-running-requests`` requests. The runtime half (the tree fed to
the hybrid backend, the accepted node's state committed) is ``sglang_ddtree.worker.hybrid``. This module reads
the package's one environment switch for hybrid targets and imports neither torch nor SGLang at import time.
"""

from __future__ import annotations

import logging
from typing import Optional, Tuple

from sglang_ddtree.config import AUTO, BUDGET_FLAG, DDTreeArgumentError, env_switch

logger = logging.getLogger(__name__)

ENV = "SGLANG_DDTREE_EXPERIMENTAL_HYBRID"
DEFAULT_MEM_FRACTION = 0.9  # when --mem-fraction-static is not resolved yet
GIB, MIB = float(1 << 30), float(1 << 20)


# The hybrid configuration GPU-verified on the H200 (SGLang 0.5.16; README "Hybrid Mamba/GDN targets"): greedy
# parity exact on the sharp hybrid fixture for budgets 1 / 15 / 64 and budget auto at batch 1 / 8 / 32, CUDA graphs
# and the overlap scheduler on and off, through the radix cache (extra_buffer, no_buffer) and without it; T > 0
# distribution; the state-fault test (sessions 11, 13, 20, 21, 22). All of it with the target (and so the
# drafter) on triton, tp 1.
VERIFIED_FAMILY = "0.5.16"
VERIFIED_ATTENTION_BACKEND = "triton"


def experimental() -> bool:
    """The switch for hybrid targets beyond the GPU-verified configuration; a value other than 0 / 1 is an error
    naming the variable."""
    return env_switch(ENV, on="DDTREE's hybrid tree verify beyond the GPU-verified configuration (experimental)",
                      off="hybrid targets in the GPU-verified configuration only", error=DDTreeArgumentError)


def release_refusal(arch: str, family: str) -> str:
    return (f"--speculative-algorithm DDTREE supports hybrid linear-attention (Mamba/GDN) targets on SGLang "
            f"{VERIFIED_FAMILY} only for now (its state commit is verified against that release's hybrid backend); "
            f"the installed family is {family} and the target architecture {arch}. Use SGLang {VERIFIED_FAMILY}, or "
            f"DFLASH for this model.")


def check_release(arch: str) -> None:
    """Hybrid targets run on the release whose hybrid backend the commit was verified against, switch or not (from
    0.5.18 the backend translates state indices); the switch's value is checked here too."""
    experimental()
    from sglang_ddtree.compat import adapter

    family = adapter().family
    if family != VERIFIED_FAMILY:
        raise DDTreeArgumentError(release_refusal(arch, family))


def local_target_is_hybrid(model_path) -> bool:
    """Whether ``model_path`` is a local checkpoint whose config.json describes a hybrid linear-attention target
    (False for a repo id or an unreadable config: validation decides later from the config SGLang loads). Read
    before SGLang's own argument handling, to pick the hybrid target's verified backend when none is named."""
    import json
    import os
    import types

    from sglang_ddtree.validation import is_hybrid_linear_attention

    config_path = os.path.join(os.path.expanduser(str(model_path or "")), "config.json")
    try:
        with open(config_path) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return False
    if not isinstance(config, dict):
        return False
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    return is_hybrid_linear_attention(types.SimpleNamespace(**text))


def unverified_reason(server_args) -> Optional[str]:
    """Why this hybrid configuration is outside the GPU-verified one (``VERIFIED_ATTENTION_BACKEND``, tp 1), or
    None when it is inside."""
    from sglang.srt.arg_groups.overrides import attention_backends_of, resolved_view

    view = resolved_view(server_args)
    prefill, decode = attention_backends_of(view)
    requested = getattr(server_args, "_ddtree_requested_attention_backends", None)
    picked = " (picked by default: no --attention-backend given)" if requested and not any(requested) else ""
    for flag, backend in (("prefill", prefill), ("decode", decode)):
        if backend != VERIFIED_ATTENTION_BACKEND:
            return f"the {flag} attention backend is '{backend}'{picked}"
    draft = getattr(server_args, "speculative_draft_attention_backend", None)
    if draft not in (None, VERIFIED_ATTENTION_BACKEND):
        return f"--speculative-draft-attention-backend is '{draft}'"
    tp = int(getattr(server_args, "tp_size", 1) or 1)
    if tp > 1:
        return f"--tp-size is {tp}"
    return None


# ---- per-node verify state memory ------------------------------------------------------------------------

def gdn_state_bytes_per_node(text_config, attn_tp_size: int = 1) -> int:
    """Bytes of one verify row's recurrent state over all GDN layers of one attention-TP rank: the conv window
    (K-1 inputs of the conv channels) plus the SSM state (value heads x key dim x value dim), in the dtypes
    SGLang's mamba pool uses (``mamba2_state_dtype``: conv in the model dtype, SSM in ``mamba_ssm_dtype``).
    Matches upstream's ``Mamba2CacheParams.mamba_cache_per_req`` for GDN configs (held by a test)."""
    import torch

    from sglang.srt.configs.mamba_utils import mamba2_state_dtype

    layers = len(gdn_layer_ids(text_config))
    k_heads, v_heads = int(text_config.linear_num_key_heads), int(text_config.linear_num_value_heads)
    k_dim, v_dim = int(text_config.linear_key_head_dim), int(text_config.linear_value_head_dim)
    conv_dim = (2 * k_heads * k_dim + v_heads * v_dim) // attn_tp_size
    dtypes = mamba2_state_dtype(text_config)
    conv = conv_dim * (int(text_config.linear_conv_kernel_dim) - 1) * torch.empty((), dtype=dtypes.conv).element_size()
    ssm = (v_heads // attn_tp_size) * k_dim * v_dim * torch.empty((), dtype=dtypes.temporal).element_size()
    return layers * (conv + ssm)


def gdn_layer_ids(text_config) -> list:
    ids = getattr(text_config, "linear_layer_ids", None)
    if ids is not None:
        return list(ids)
    return [i for i, t in enumerate(getattr(text_config, "layer_types", None) or ()) if t == "linear_attention"]


def intermediate_state_bytes(per_node_bytes: int, num_verify_tokens: int, max_running_requests: int) -> int:
    """Per-node verify states the target's mamba pool allocates: rows x requests x bytes per row."""
    return int(per_node_bytes) * int(num_verify_tokens) * int(max_running_requests)


def largest_fitting_budget(per_node_bytes: int, max_running_requests: int, capacity_bytes: float,
                           mem_fraction: float) -> int:
    """The largest budget whose per-node verify states for ``max_running_requests`` requests fit in
    ``mem_fraction`` of the GPU (-1: not even budget 0, i.e. one row). For ``--speculative-ddtree-budget auto``:
    its width buckets must not exceed this (the pool is sized for the largest bucket)."""
    rows = int(float(capacity_bytes) * float(mem_fraction) // (int(per_node_bytes) * max(int(max_running_requests), 1)))
    return rows - 1


# Budget auto on a hybrid target keeps its per-row states within this share of --mem-fraction-static of the GPU
# (the rest for weights, the KV cache and activations): e.g. the Qwen3.5-9B shape at 48 requests on an H200 at 0.9
# gets buckets up to 15 (16 rows, 36.8 GiB: what DFLASH's 16-row verify keeps there), at 16 requests all up to 63.
AUTO_STATE_SHARE = 0.5


def _state_inputs(server_args, text_config) -> Tuple[int, int, float]:
    """(bytes per verify row, --max-running-requests, --mem-fraction-static) of the per-row state memory checks."""
    return (gdn_state_bytes_per_node(text_config, int(server_args.tp_size)), int(server_args.max_running_requests or 1),
            float(server_args.mem_fraction_static or DEFAULT_MEM_FRACTION))


def auto_largest_fitting_bucket(server_args) -> Optional[Tuple[int, str]]:
    """(the largest budget-auto bucket (``config.bucket_budgets(AUTO_MAX_BUDGET)``, 0 excluded) whose per-row states
    for ``--max-running-requests`` requests take at most ``AUTO_STATE_SHARE`` of ``--mem-fraction-static`` of the
    GPU, 0 when not even bucket 1 does; the numbers, for the log), or None where that cannot be told here (no GPU
    capacity, not a Gated DeltaNet target: the later checks then decide)."""
    from sglang.srt.configs.hybrid_arch import hybrid_gdn_config

    from sglang_ddtree.config import AUTO_MAX_BUDGET, bucket_budgets

    capacity = _gpu_capacity_bytes(server_args)
    text = hybrid_gdn_config(server_args.get_model_config())
    if capacity is None or text is None:
        return None
    per_node, reqs, fraction = _state_inputs(server_args, text)
    fits = largest_fitting_budget(per_node, reqs, capacity, fraction * AUTO_STATE_SHARE)
    largest = max([b for b in bucket_budgets(AUTO_MAX_BUDGET) if 1 <= b <= fits], default=0)
    return largest, (f"{per_node / MIB:.2f} MiB per row x {reqs} requests (--max-running-requests): "
                     f"{intermediate_state_bytes(per_node, largest + 1, reqs) / GIB:.1f} GiB at {largest + 1} rows, "
                     f"at most {AUTO_STATE_SHARE:g} of {fraction:g} (--mem-fraction-static) of this GPU's "
                     f"{capacity / GIB:.1f} GiB")


def budget_text(budget: int, auto: bool) -> str:
    """How messages name the budget that sizes the per-row states: the fixed one, or budget auto's largest bucket
    (the pool and every width's graphs are sized for it)."""
    return f"{BUDGET_FLAG} {AUTO}'s largest bucket {budget}" if auto else f"{BUDGET_FLAG} {budget}"


def check_intermediate_state_fits(per_node_bytes: int, budget: int, max_running_requests: int,
                                  capacity_bytes: Optional[float], mem_fraction: float, *, auto: bool = False) -> None:
    """Refuse a budget whose per-node verify states alone exceed ``mem_fraction`` of the GPU (weights, KV and
    activations still come on top, so passing is necessary, not sufficient). The message carries the numbers,
    the largest budget that fits the requests and the most requests that fit the budget. ``auto``: ``budget`` is
    budget auto's largest bucket (its buckets never verify more rows than that)."""
    if capacity_bytes is None:
        return
    room = float(capacity_bytes) * float(mem_fraction)
    n, reqs = budget + 1, int(max_running_requests)
    need = intermediate_state_bytes(per_node_bytes, n, reqs)
    if need <= room:
        return
    max_budget = largest_fitting_budget(per_node_bytes, reqs, capacity_bytes, mem_fraction)
    max_reqs = int(room // (per_node_bytes * n))
    which = f"budget {AUTO}" if auto else f"budget {budget}"
    fix = (f"{'a fixed ' if auto else ''}{BUDGET_FLAG} <= {max_budget} fits {reqs} requests" if max_budget >= 1
           else f"no budget fits {reqs} requests")
    fix += (f", or --max-running-requests <= {max_reqs} fits {which}" if max_reqs >= 1
            else f"; {which} does not fit even one request")
    raise DDTreeArgumentError(
        f"--speculative-algorithm DDTREE on this hybrid target keeps one recurrent (conv + SSM) state per tree row: "
        f"{per_node_bytes / MIB:.2f} MiB per row x {n} rows ({budget_text(budget, auto)} + 1) = "
        f"{per_node_bytes * n / GIB:.2f} GiB per request, x {reqs} requests (--max-running-requests) = "
        f"{need / GIB:.1f} GiB, more than {mem_fraction:g} (--mem-fraction-static) of this GPU's "
        f"{capacity_bytes / GIB:.1f} GiB; {fix}."
    )


# ---- the validation step -----------------------------------------------------------------------------------

def check_server_args(server_args, config) -> None:
    """All hybrid rules for a validated DDTREE configuration (``config``: the ``DDTreeConfig``) whose target is
    hybrid; the release was checked before (``check_release``). Raises ``DDTreeArgumentError``."""
    from sglang.srt.arg_groups.overrides import mamba_extra_buffer_of, resolved_view
    from sglang.srt.configs.hybrid_arch import hybrid_gdn_config

    from sglang_ddtree.validation import PAGED_ENV, paged_kv_enabled

    model_config = server_args.get_model_config()
    arch = (getattr(model_config.hf_config, "architectures", None) or ["?"])[0]
    text = hybrid_gdn_config(model_config)
    if text is None:
        raise DDTreeArgumentError(
            f"--speculative-algorithm DDTREE's hybrid tree verify supports Gated DeltaNet targets only "
            f"(Qwen3.5 / Qwen3.6 / Qwen3-Next); the target architecture is {arch}.")
    for flag in ("enable_gdn_replayssm_spec", "enable_linear_replayssm"):
        if getattr(server_args, flag, False):
            raise DDTreeArgumentError(
                f"--{flag.replace('_', '-')} cannot be used with --speculative-algorithm DDTREE: ReplaySSM keeps "
                f"a linear chain of states, a tree verify needs one state per tree row.")
    view = resolved_view(server_args)
    n = config.num_verify_tokens  # with budget auto: of its largest bucket, which sizes every buffer
    auto = bool(getattr(config, "adaptive", False))
    why = unverified_reason(server_args)  # None: the GPU-verified configuration
    paged = view.page_size is not None and view.page_size > 1
    # page sizes > 1 as the H200 verified them (session 26, `bash scripts/device/hybrid.sh paged_hybrid`: page 16 / 64
    # token-identical to page 1 on the sharp fixture, shared-prefix radix phase included;
    # benchmark/results/session26/paged_hybrid): in the configuration above (triton, tp 1), budgets 15 / 64, graphs and
    # overlap on and off, the radix cache on extra_buffer (every DDTREE config there, overlap off included: SGLang
    # 0.5.16 resolved the strategy to extra_buffer) or off (a subset: no track points); no_buffer never ran paged
    radix = getattr(view, "uses_mamba_radix_cache", False) and not view.disable_radix_cache
    paged_why = None  # why this page size > 1 is outside that configuration
    if paged and auto:
        paged_why = f"{BUDGET_FLAG} is {AUTO}"
    elif paged and radix and not mamba_extra_buffer_of(view):
        paged_why = f"the radix cache runs on --mamba-scheduler-strategy {view.mamba_radix_cache_strategy}"
    elif paged:
        paged_why = why
    if paged_why is not None and not paged_kv_enabled():
        raise DDTreeArgumentError(
            f"--speculative-algorithm DDTREE on a hybrid target supports --page-size {view.page_size} only with "
            f"--attention-backend {VERIFIED_ATTENTION_BACKEND}, --tp-size 1, a fixed budget and the radix cache off or "
            f"on --mamba-scheduler-strategy extra_buffer for now, but {paged_why} (use --page-size 1, or set "
            f"{PAGED_ENV}=1 to try it: not yet verified on a GPU).")
    if why is not None and not experimental():
        raise DDTreeArgumentError(
            f"--speculative-algorithm DDTREE on hybrid targets is GPU-verified with --attention-backend "
            f"{VERIFIED_ATTENTION_BACKEND} (the drafter's unset or the same) and --tp-size 1 only for now, but {why} "
            f"(use --attention-backend {VERIFIED_ATTENTION_BACKEND}, or set {ENV}=1 to try it: not yet verified on a "
            f"GPU).")
    if radix:
        strategy = view.mamba_radix_cache_strategy
        if strategy == "extra_buffer_lazy":
            raise DDTreeArgumentError(
                "--mamba-scheduler-strategy extra_buffer_lazy does not support speculative decoding in SGLang; "
                "use extra_buffer (or no_buffer with --disable-overlap-schedule, or --disable-radix-cache).")
        if mamba_extra_buffer_of(view) and int(view.mamba_track_interval) < n:
            raise DDTreeArgumentError(
                f"--mamba-track-interval {view.mamba_track_interval} must be >= the DDTREE verify width {n} "
                f"({budget_text(config.budget, auto)} + 1) with --mamba-scheduler-strategy extra_buffer (one radix "
                f"track point per round at most).")
        if not mamba_extra_buffer_of(view) and not view.disable_overlap_schedule:
            raise DDTreeArgumentError(
                "--mamba-scheduler-strategy no_buffer needs --disable-overlap-schedule; with the overlap "
                "scheduler use --mamba-scheduler-strategy extra_buffer (or --disable-radix-cache).")
    per_node, reqs, fraction = _state_inputs(server_args, text)
    check_intermediate_state_fits(per_node, config.budget, reqs, _gpu_capacity_bytes(server_args), fraction, auto=auto)
    beyond = [f"{ENV}=1: {why}"] if why is not None else []
    if paged_why is not None:
        beyond.append(f"{PAGED_ENV}=1: --page-size {view.page_size}, {paged_why}")
    (logger.warning if beyond else logger.info)(
        "DDTREE on hybrid target %s: %s. Per-node verify states: %.2f MiB per row, %.2f GiB per request at %s, "
        "%.1f GiB for %d requests.", arch,
        f"EXPERIMENTAL ({'; '.join(beyond)})" if beyond else "the GPU-verified configuration", per_node / MIB,
        per_node * n / GIB, budget_text(config.budget, auto), intermediate_state_bytes(per_node, n, reqs) / GIB, reqs,
    )


def _gpu_capacity_bytes(server_args) -> Optional[float]:
    """The device's memory as SGLang reads it at argument time (MiB -> bytes); None where unknown."""
    try:
        from sglang.srt.utils.common import get_device_memory_capacity

        mib = get_device_memory_capacity(server_args.device)
    except Exception as e:  # no device query possible here: the pool's own check at start still applies
        logger.debug("DDTREE: no GPU memory capacity at validation: %s", e)
        return None
    return None if mib is None else float(mib) * MIB
