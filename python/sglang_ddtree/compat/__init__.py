"""The version layer: every upstream SGLang touchpoint of sglang-ddtree, and one adapter per release family.

``UPSTREAM_SYMBOLS`` below is the table of contents: each entry names one upstream name we import, hook,
override, read or pass, and (``releases``) which releases have it where that differs. ``adapter()``
(``compat.release``) returns the installed release family's adapter (``sglang_0_5_16``, ``sglang_0_5_17``,
...); where releases differ, the package asks the adapter and never compares versions itself.

When the pinned SGLang is bumped, ``python -m sglang_ddtree doctor`` (and
``test/plugin/test_compat_scan.py``) names every symbol that moved, before anything fails at serving
time. The list holds what we import or hook, the upstream members our subclasses call, override or
write, the attributes of upstream objects our hooks and the round read, the ``ServerArgs`` fields we
read or set, and the keyword arguments we pass. The scan test fails on any upstream name the package
source uses that is missing here (its docstring gives the scan's rules): a module that starts using
an upstream name adds it here.

Kinds (how ``check_symbol`` checks the last component of ``path``):
  MODULE    a module that exists at that path (found, not imported: the doctor's server-modules check
            imports the server's modules with all their dependencies).
  ATTR      attribute of a module (including ``Class.attr`` chains): imported and resolved.
  MEMBER    method / property / class attribute / enum member, in the class ``__dict__`` of the owner
            or an upstream base.
  INSTANCE  attribute upstream code sets on instances: a ``self.<name> = ...`` in the source of the
            owner or an upstream base, a dataclass / struct field, or a member.
  FIELD     a dataclass (or msgspec struct) field of the owner (``ServerArgs``, spec-info classes).
  PARAMS    ``callable(a, b)``: each name is a parameter of the callable's signature (the keyword
            arguments we pass, or the positional ones whose order we rely on).

Entries with ``releases`` (a PEP 440 specifier) belong to one family's adapter; the doctor, the tests and
``scripts/check_upstream.py`` check an entry only against the releases it names.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from sglang_ddtree.compat.release import FAMILIES, Family, adapter, adapter_for, family_of  # noqa: F401
from sglang_ddtree.compat.resolve import (  # noqa: F401  (the names callers import from compat)
    ATTR,
    FIELD,
    INSTANCE,
    KINDS,
    MEMBER,
    MODULE,
    MODULES_NEEDING,
    OWN_CHECK_PACKAGES,
    PARAMS,
    Symbol,
    _absent_package,
    check_symbol,
    needed_package,
    resolve,
    self_assigned_in,
    upstream_has,
)


def _on(owner: str, kind: str, releases: str = "", **purposes: str) -> Tuple[Symbol, ...]:
    """One Symbol per ``name=purpose`` on ``owner`` (a dotted class path)."""
    return tuple(Symbol(f"{owner}.{name}", purpose, kind, releases) for name, purpose in purposes.items())


def _params(callable_path: str, names: str, purpose: str, releases: str = "") -> Symbol:
    return Symbol(f"{callable_path}({names})", purpose, PARAMS, releases)


# Upstream paths several entries share.
_SERVER_ARGS = "sglang.srt.server_args.ServerArgs"
_WORKER = "sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2"
_DRAFT_INPUT = "sglang.srt.speculative.dflash_info_v2.DFlashDraftInputV2"
_VERIFY_INPUT = "sglang.srt.speculative.dflash_info.DFlashVerifyInput"
_BATCH = "sglang.srt.managers.schedule_batch.ScheduleBatch"
_REQ = "sglang.srt.managers.schedule_batch.Req"
_REPORTER = "sglang.srt.managers.scheduler_components.metrics_reporter.SchedulerMetricsReporter"
_MODEL_RUNNER = "sglang.srt.model_executor.model_runner.ModelRunner"
_GRAPH_RUNNER = "sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner"
_SAMPLING_INFO = "sglang.srt.sampling.sampling_batch_info.SamplingBatchInfo"
_SAMPLING_PARAMS = "sglang.srt.sampling.sampling_params.SamplingParams"
_SPEC_ALGO = "sglang.srt.speculative.spec_info.SpeculativeAlgorithm"
_FORWARD_INFO = "sglang.srt.model_executor.forward_batch_info"
_FI_PREFILL = "sglang.srt.layers.attention.flashinfer_backend.FlashInferIndicesUpdaterPrefill"
_FI_BACKEND = "sglang.srt.layers.attention.flashinfer_backend.FlashInferAttnBackend"
_GROUP = "sglang.srt.distributed.parallel_state.GroupCoordinator"
_VOCAB = "sglang.srt.layers.vocab_parallel_embedding"
_FA3 = "sglang.srt.layers.attention.flashattention_backend.FlashAttentionBackend"
_FA3_METADATA = "sglang.srt.layers.attention.flashattention_backend.FlashAttentionMetadata"

UPSTREAM_SYMBOLS: Tuple[Symbol, ...] = (
    # ---- sglang.srt.plugins: entry point and hooks ----------------------------------------------------
    Symbol("sglang.srt.plugins", "its name is the entry-point group load_plugins reads (doctor)", MODULE),
    Symbol("sglang.srt.plugins.load_plugins", "plugin loading (calls plugin.register, applies the hooks)"),
    Symbol("sglang.srt.plugins.hook_registry.HookRegistry", "installing hooks (plugin, worker.hooks)"),
    *_on("sglang.srt.plugins.hook_registry.HookRegistry", MEMBER, register="HookRegistry.register(target, hook, type)"),
    Symbol("sglang.srt.plugins.hook_registry.HookType", "hook kinds"),
    *_on("sglang.srt.plugins.hook_registry.HookType", MEMBER,
         AROUND="worker hooks, prepare_server_args one-line errors", REPLACE="ServerArgs class replacement"),
    # ---- sglang.srt.speculative.spec_info / spec_registry: the DDTREE algorithm -------------------------
    Symbol(_SPEC_ALGO, "registering DDTREE; the draft forward's spec_algorithm"),
    *_on(_SPEC_ALGO, MEMBER,
         register="SpeculativeAlgorithm.register(name, supports_overlap=, spec_class=)(worker_factory)",
         DFLASH="draft forward's spec_algorithm (worker._draft)",
         need_topk="scheduler calls it on every algorithm; DDTreeSpecAlgo implements it",
         carries_draft_hidden_states="scheduler calls it on every algorithm; DDTreeSpecAlgo implements it",
         create_future_map="scheduler calls it on every algorithm; DDTreeSpecAlgo implements it"),
    _params(f"{_SPEC_ALGO}.register", "supports_overlap, spec_class", "plugin.register"),
    Symbol("sglang.srt.speculative.spec_info.create_dummy_verify_input", "worker hook: capture dummy with tree mask"),
    _params("sglang.srt.speculative.spec_info.create_dummy_verify_input",
            "spec_algorithm, server_args, custom_mask, num_tokens_per_req, is_draft_worker",
            "positional order the worker hook relies on (0.5.16 family)", "<0.5.18"),
    _params("sglang.srt.speculative.spec_info.create_dummy_verify_input",
            "spec_algorithm, custom_mask, num_tokens_per_req, is_draft_worker",
            "positional order compat adapter 0.5.18 relies on", ">=0.5.18"),
    Symbol("sglang.srt.speculative.spec_registry.CustomSpecAlgo", "base class of DDTreeSpecAlgo"),
    *_on("sglang.srt.speculative.spec_registry.CustomSpecAlgo", MEMBER,
         is_dflash_family="overridden: DDTREE's drafter is DFLASH's",
         supports_target_verify_for_draft="overridden: draft runner captures target-verify graphs",
         has_draft_kv="overridden: the drafter has its own KV",
         handle_server_args="overridden: DDTREE validation (validation.handle_ddtree_server_args)"),
    *_on("sglang.srt.speculative.spec_registry.CustomSpecAlgo", INSTANCE, name="DDTreeSpecAlgo.__repr__, is_ddtree"),
    Symbol("sglang.srt.speculative.spec_registry.get_spec", "idempotent registration"),
    Symbol("sglang.srt.managers.min_free_slots_delayer.MinFreeSlotsDelayer",
           "the class whose should_delay the admission window hooks (built for DFLASH-family servers)"),
    Symbol("sglang.srt.managers.min_free_slots_delayer.MinFreeSlotsDelayer.should_delay",
           "admission window hook (worker.admission; worker.hooks.ADMISSION_HOOK_TARGETS, SGLANG_DDTREE_ADMIT_WAIT)",
           MEMBER),
    _params("sglang.srt.managers.min_free_slots_delayer.MinFreeSlotsDelayer.should_delay",
            "running_bs, num_allocatable_reqs", "keyword names the admission hook passes on"),
    Symbol("sglang.srt.managers.min_free_slots_delayer.resolve_min_free_slots",
           "admission.start_line: whether this server has a delayer (so a window)"),
    _params("sglang.srt.managers.min_free_slots_delayer.resolve_min_free_slots",
            "user_value, max_running_requests, is_dflash_family", "admission.start_line's call"),
    Symbol("sglang.srt.managers.overlap_utils.FutureMap",
           "DDTreeSpecAlgo.create_future_map (needs_cpu_seq_lens False: no wait for the previous round)"),
    _params("sglang.srt.managers.overlap_utils.FutureMap",
            "device, spec_algo, req_to_token_pool, needs_cpu_seq_lens, needs_confidence_relay",
            "positional order of DDTreeSpecAlgo.create_future_map's call"),
    # ---- sglang.srt.server_args / arg_groups / entrypoints: the flags ---------------------------------
    Symbol(_SERVER_ARGS, "base class of DDTreeServerArgs; REPLACE hook target"),
    *_on(_SERVER_ARGS, MEMBER,
         __post_init__="overridden: DDTreeServerArgs records the requested backends first"),
    *_on(_SERVER_ARGS, MEMBER, "<0.5.20",  # gone from 0.5.20 (mamba_extra_buffer_of); the hybrid verify is 0.5.16's
         enable_mamba_extra_buffer="hybrid: radix track slots (extra_buffer strategy)"),
    *_on(_SERVER_ARGS, MEMBER, ">=0.5.20",
         _NS_BY_FIELD="compat adapter 0.5.20: the assembled record's {field: namespace}; DDTREE's fields join 'spec'"),
    Symbol("sglang.srt.arg_groups.overrides.record_foreign_defaults",
           "compat adapter 0.5.20: hands DDTreeSpecAlgo.handle_server_args a stand-in and declares its writes", ATTR,
           ">=0.5.20"),
    *_on(_SERVER_ARGS, MEMBER, "<0.5.19",
         get_model_config="compat adapter 0.5.16: validation reads the target's HF config",
         max_speculative_num_draft_tokens="cached value worker.draft_view drops from the drafter's copy"),
    Symbol("sglang.srt.configs.model_config.ModelConfig", "compat adapter 0.5.19: the target's model config"),
    Symbol("sglang.srt.configs.model_config.ModelConfig.from_server_args",
           "compat adapter 0.5.19: validation reads the target's HF config"),
    *_on(_SERVER_ARGS, MEMBER, "<0.5.18",
         override="compat adapter 0.5.16: the width fields of the drafter's copy (worker.draft_view) and the "
                  "target's verify width while budget auto builds a bucket's backend and graphs (worker.widths)"),
    Symbol("sglang.srt.arg_groups.overrides._apply_fields",
           "compat adapter 0.5.18: the width fields of the drafter's copy (worker.draft_view) and of the target "
           "while budget auto builds a bucket (worker.widths)", ATTR,
           ">=0.5.18,<0.5.19"),
    Symbol("sglang.srt.arg_groups.overrides.declare_resolution",
           "compat adapter 0.5.19: DDTREE's resolved fields declared in the stash the config bags are projected "
           "from (validation), and the drafter's widths in its copy's (worker.draft_view)", ATTR, ">=0.5.19"),
    *_on(_SERVER_ARGS, MEMBER, ">=0.5.19",
         resolve_once="compat adapter 0.5.19: resolution after construction (tests' parse and Engine paths)"),
    *_on(_SERVER_ARGS, FIELD,
         speculative_algorithm="is this DDTREE (config.is_ddtree, DDTreeServerArgs)",
         min_free_slots_delay="admission.start_line: whether this server has a prefill delayer (worker start-up log)",
         speculative_draft_model_path="validation (drafter check), draft block size",
         speculative_num_draft_tokens="set to budget + 1 (validation); drafter's copy gets L (draft_view)",
         speculative_num_steps="set to 1 (validation); upstream accept fragment (metrics)",
         speculative_eagle_topk="set to topk (validation); drafter's copy gets 1 (draft_view)",
         speculative_dflash_block_size="set to L (validation); read by DDTreeConfig",
         speculative_draft_window_size="refused (validation)",
         speculative_adaptive="refused (validation)",
         speculative_accept_threshold_single="tree sampling threshold (worker.sampling)",
         speculative_accept_threshold_acc="tree sampling threshold (worker.sampling)",
         attention_backend="requested / default backend (DDTreeServerArgs, validation)",
         prefill_attention_backend="requested backend (DDTreeServerArgs, validation)",
         decode_attention_backend="requested backend (DDTreeServerArgs, validation)",
         device="CUDA only (validation)",
         pp_size="must be 1 (validation)",
         page_size="> 1 only where a GPU verified it, else behind its switch (validation, hybrid_args)",
         model_path="a local hybrid checkpoint's config.json: its default backend (DDTreeServerArgs)",
         enable_dp_attention="refused (validation, through resolved_view)",
         disaggregation_mode="refused (validation)",
         speculative_draft_attention_backend="fa3 refused off Hopper / Ampere (validation)",
         cuda_graph_backend_prefill="full refused: its graphs drop the captured hidden states (validation)",
         cuda_graph_config="draft CUDA-graph batch sizes (worker._maybe_build_draft_sampler); the target's prefill "
                           "graph sizes from 1 token (validation)",
         mamba_track_interval="hybrid: radix track point; >= verify width (hybrid_args)",
         mamba_radix_cache_strategy="hybrid_args: --mamba-scheduler-strategy rules",
         uses_mamba_radix_cache="hybrid_args: the hybrid radix cache is on",
         disable_radix_cache="hybrid_args: strategy rules apply with the radix cache",
         disable_overlap_schedule="hybrid_args: no_buffer needs it",
         tp_size="hybrid_args: per-rank state bytes, verified at 1; budget auto at tp > 1 behind its switch",
         max_running_requests="hybrid_args: per-node state memory",
         mem_fraction_static="hybrid_args: memory bound; widths: named in auto's graph-memory error",
         enable_linear_replayssm="hybrid_args: refused",
         enable_two_batch_overlap="algorithm: keeps upstream's host lengths before a round (create_future_map)"),
    *_on(_SERVER_ARGS, FIELD, ">=0.5.22",
         attn_dp_size="compat adapter 0.5.22: attention DP refused by its width (validation)"),
    *_on(_SERVER_ARGS, FIELD, "<0.5.17",  # gone from 0.5.17 (read with getattr, default off)
         enable_gdn_replayssm_spec="hybrid_args: refused"),
    *_on("sglang.srt.model_executor.cuda_graph_config.CudaGraphConfig", FIELD,
         decode="server_args.cuda_graph_config.decode.bs (worker)"),
    *_on("sglang.srt.model_executor.cuda_graph_config.CudaGraphConfig", FIELD,
         prefill="the target's prefill graph sizes from 1 token (validation)"),
    *_on("sglang.srt.model_executor.cuda_graph_config.PhaseConfig", FIELD,
         bs="captured decode batch sizes (worker); prefill graph sizes from 1 token (validation)",
         backend="prefill graphs from 1 token only where they are breakable (validation)"),
    Symbol("sglang.srt.model_executor.cuda_graph_config.Phase.PREFILL",
           "validation: whether the user named the prefill graph sizes (_cuda_graph_config_locked)"),
    Symbol("sglang.srt.model_executor.cuda_graph_config.Backend.BREAKABLE",
           "validation: prefill graphs from 1 token only on upstream's default (breakable) prefill graphs"),
    Symbol("sglang.srt.model_executor.cuda_graph_config.Backend.FULL",
           "validation: refused with DDTREE (its prefill graphs drop the captured hidden states)"),
    Symbol("sglang.srt.model_executor.cuda_graph_config.Phase", "validation: the prefill phase's key"),
    Symbol("sglang.srt.model_executor.cuda_graph_config.Backend", "validation: the prefill graph backend"),
    # the (phase, key) pairs the user set (validation keeps prefill graph sizes given), set on the instance by
    # ServerArgs up to 0.5.18, then by the cuda-graph hook
    *_on(_SERVER_ARGS, INSTANCE, "<0.5.19", _cuda_graph_config_locked="validation: prefill graph sizes the user gave"),
    Symbol("sglang.srt.arg_groups.cuda_graph_hook.parse_cuda_graph_config",
           "sets server_args._cuda_graph_config_locked (validation: prefill graph sizes the user gave)", ATTR,
           ">=0.5.19"),
    Symbol("sglang.srt.server_args.prepare_server_args", "CLI parsing of the flags; AROUND hook for one-line errors"),
    _params("sglang.srt.server_args.prepare_server_args", "argv", "the AROUND hook calls original(argv)"),
    Symbol("sglang.srt.entrypoints.engine.Engine.server_args_class", "REPLACE hook for sglang.Engine kwargs"),
    Symbol("sglang.srt.arg_groups.arg_utils.A", "flag declarations (Annotated alias)"),
    Symbol("sglang.srt.arg_groups.arg_utils.Arg", "flag declarations"),
    _params("sglang.srt.arg_groups.arg_utils.Arg", "help", "flag help text"),
    Symbol("sglang.srt.arg_groups.speculative_hook._handle_dflash", "drafter block size / draft backend"),
    Symbol("sglang.srt.arg_groups.overrides.resolved_view",
           "validation: reading resolved device / parallelism / page size / attention backends, and the drafter "
           "block size _handle_dflash resolved (a declaration from 0.5.19)"),
    Symbol("sglang.srt.arg_groups.overrides.attention_backends_of", "reading resolved attention backends"),
    Symbol("sglang.srt.runtime_context.get_spec", "compat adapter 0.5.17: the drafter's widths, scoped", ATTR,
           ">=0.5.17"),
    *_on("sglang.srt.runtime_context._ConfigBag", MEMBER, ">=0.5.17",
         override="compat adapter 0.5.17: get_spec().override(...), the drafter's scoped widths"),
    Symbol("sglang.srt.runtime_context.get_context", "tests publish stand-in server args (override_server_args)"),
    Symbol("sglang.srt.runtime_context.get_server_args",
           "per-request checks, KV reserve, tree-sampling thresholds, fa3_tree, admission (is this a DDTREE server)"),
    # ---- sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2: base of DDTreeWorker -------------------
    Symbol(_WORKER, "base class of the DDTREE worker"),
    _params(f"{_WORKER}.__init__", "server_args, gpu_id, ps, nccl_port, target_worker",
            "super().__init__ positional order (compat adapter 0.5.16)", "<0.5.21"),
    _params(f"{_WORKER}.__init__", "server_args, gpu_id, nccl_port, target_worker",
            "super().__init__ positional order (compat adapter 0.5.21)", ">=0.5.21"),
    *_on(_WORKER, MEMBER,
         __init__="super().__init__ with the drafter's view of the server args",
         forward_batch_generation="overridden: decode rounds are DDTree's; super() for prefill",
         target_worker="target model worker (property)",
         _maybe_build_draft_sampler="overridden: folds the top-K head into the draft CUDA graph",
         _make_next_draft_input_prefill="overridden: DDTreeDraftInput after prefill",
         _make_next_draft_input_decode="overridden: DDTreeDraftInput after decode",
         _ensure_draft_block_buffers="allocates the draft block buffers below (worker._draft)",
         _append_target_hidden_to_draft_kv_by_loc="writes the accepted path's hidden states into the draft KV",
         alloc_memory_pool="overridden: the scheduler's draft set-up call, run in the drafter's widths",
         init_attention_backends="overridden: the scheduler's draft set-up call, run in the drafter's widths "
                                 "(0.5.17+: fa3 / triton read the widths from get_spec() there)",
         init_cuda_graphs="overridden: in the drafter's widths; then the draft-KV graphs and budget auto's "
                          "per-width verify graphs and calibration"),
    _params(f"{_WORKER}._append_target_hidden_to_draft_kv_by_loc",
            "target_hidden, cache_loc, positions, cache_loc_2d, commit_lens", "COMMIT step (worker)"),
    # worker.prefill (SGLANG_DDTREE_PREFILL_ASYNC=1, the 0.5.16 family only): upstream's prefill steps, restated
    *_on(_WORKER, MEMBER, "<0.5.17",
         _validate_phase1_sampling_support="worker.prefill: upstream's check before the prefill"),
    _params("sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation", "batch, capture_hidden_mode",
            "worker.prefill: the target's prefill with the drafter's hidden states", "<0.5.17"),
    Symbol(f"{_FORWARD_INFO}.compute_position", "worker.prefill: the prompt tokens' positions for the draft KV"),
    _params(f"{_FORWARD_INFO}.compute_position", "attn_backend, extend_prefix_lens, extend_seq_lens, "
            "extend_seq_lens_sum", "worker.prefill (positional)", "<0.5.17"),
    *_on(_BATCH, FIELD, "<0.5.17", extend_lens="worker.prefill: prompt tokens per request",
         prefix_lens="worker.prefill: cached prefix per request"),
    *_on(_WORKER, INSTANCE,
         server_args="set back to the target's args after super().__init__",
         device="the worker's device",
         model_runner="target model runner (req_to_token, KV moves)",
         draft_model_runner="draft forward (worker._draft)",
         draft_model="the DFlash drafter: its fc input width sizes the draft-KV append graphs (draft_kv_graph); "
                     "its buffers (RoPE cache) are kept alive for them",
         _fused_kv_helper="upstream's fused-KV helper: its workspace tensors at capture are kept alive for the "
                          "draft-KV append graphs (it regrows them)",
         block_size="drafter block size L, checked against DDTreeConfig",
         use_compact_draft_cache="refused: draft window size",
         _mask_token_id="mask token of the draft block",
         _draft_sampler="CUDA-graph top-K head set by upstream from _maybe_build_draft_sampler",
         _draft_block_spec_info="spec info of the draft block forward",
         _draft_block_ids_buf="[cap_bs, L] draft block token ids",
         _draft_block_positions_buf="[cap_bs, L] draft block positions",
         _draft_verify_out_cache_loc_buf="[cap_bs, L] draft block KV slots",
         _draft_seq_lens_cpu_buf="[cap_bs] host draft seq lens"),
    # ---- sglang.srt.speculative.dflash_info_v2 / dflash_info: the SpecInput dataclasses ---------------
    Symbol(_DRAFT_INPUT, "base class of DDTreeDraftInput"),
    *_on(_DRAFT_INPUT, MEMBER,
         create_idle_input="idle-batch draft input (worker)",
         prepare_for_decode="overridden: DDTree's KV reservation",
         _ensure_prepare_length_buffers="allocates the _prepare_* buffers below (info.prepare_for_decode)"),
    *_on(_DRAFT_INPUT, FIELD,
         topk_p="empty (make_draft_input)", topk_index="empty (make_draft_input)",
         hidden_states="empty (make_draft_input)", bonus_tokens="the next round's roots",
         new_seq_lens="committed lengths after the round",
         max_top_k="set per round (prepare_for_decode)", uniform_top_k_value="set per round (prepare_for_decode)"),
    *_on(_DRAFT_INPUT, FIELD, "<0.5.19",
         reserved_seq_lens_cpu="host bound of the reservation (compat adapter 0.5.16: record_reserved_lens)",
         reserved_seq_lens_sum="its sum (compat adapter 0.5.16: record_reserved_lens)"),
    *_on(_DRAFT_INPUT, FIELD, ">=0.5.19",
         nxt_kv_lens_cpu="host bound of the reservation (compat adapter 0.5.19: record_reserved_lens)",
         nxt_kv_lens_sum="its sum (compat adapter 0.5.19: record_reserved_lens)"),
    *_on(_DRAFT_INPUT, INSTANCE,
         _prepare_batch_seq_lens_cpu_buf="[cap_bs] host committed lengths",
         _prepare_cur_kv_lens_cpu_buf="[cap_bs] host allocated lengths",
         _prepare_nxt_kv_lens_cpu_buf="[cap_bs] host reserved lengths",
         _prepare_cur_kv_lens_gpu_buf="[cap_bs] device allocated lengths",
         _prepare_nxt_kv_lens_gpu_buf="[cap_bs] device reserved lengths"),
    Symbol(_VERIFY_INPUT, "base class of DDTreeVerifyInput"),
    *_on(_VERIFY_INPUT, MEMBER, prepare_for_verify="builds the verify ForwardBatch (worker._verify)"),
    _params(f"{_VERIFY_INPUT}.prepare_for_verify", "batch, target_worker", "positional order (worker._verify)"),
    *_on(_VERIFY_INPUT, FIELD,
         draft_token="[bs*N] tree tokens", positions="[bs*N] tree positions", draft_token_num="N",
         topk="K", custom_mask="FULL_MASK tree mask", capture_hidden_mode="FULL (aux hidden states)"),
    Symbol("sglang.srt.speculative.dflash_utils.validate_dflash_request", "worker hook: per-request refusals"),
    Symbol("sglang.kernels.ops.speculative.cache_locs.assign_extend_cache_locs_func",
           "verify KV slots (worker; warmup compiles it per batch-size class)"),
    _params("sglang.kernels.ops.speculative.cache_locs.assign_extend_cache_locs_func",
            "req_pool_indices, req_to_token, start_offset, end_offset, batch_size, draft_token_num, device",
            "verify KV slots (worker)"),
    Symbol("sglang.kernels.ops.speculative.dflash._prepare_dflash_draft_block_unchecked", "draft block (worker)"),
    _params("sglang.kernels.ops.speculative.dflash._prepare_dflash_draft_block_unchecked",
            "bonus_tokens, prefix_lens, req_pool_indices, req_to_token, block_ids_out, positions_out, "
            "cache_loc_out, mask_token_id", "draft block inputs (worker)"),
    # ---- sglang.srt.managers: batch, requests, results, scheduler metrics -----------------------------
    *_on(_BATCH, MEMBER, batch_size="prepare_for_decode"),
    *_on(_BATCH, FIELD,
         reqs="prepare_for_decode", req_pool_indices="KV slots", req_to_token_pool="row width, KV slots",
         tree_cache="alloc_for_spec_decode", device="buffers", seq_lens="committed lengths [bs]",
         seq_lens_cpu="host committed lengths (set by prepare_for_decode; swapped around the verify)",
         seq_lens_sum="their sum (same)", out_cache_loc="verify KV slots", spec_info="draft state",
         spec_algorithm="is this DDTREE (metrics)", forward_mode="decode / extend / idle",
         is_extend_in_batch="prefill goes to upstream", sampling_info="temperatures, penalties",
         return_logprob="asserted off", mamba_track_indices="hybrid COMMIT: radix track slots",
         token_to_kv_pool_allocator="free slots for the KV top-ups (prepare_for_decode)"),
    *_on("sglang.srt.mem_cache.allocator.base.BaseTokenToKVPoolAllocator", MEMBER,
         available_size="free slots for the KV top-ups (prepare_for_decode)"),
    *_on("sglang.srt.mem_cache.allocator.base.BaseTokenToKVPoolAllocator", INSTANCE,
         page_size="a page of slack per request in the KV top-up guard (prepare_for_decode)"),
    *_on(_REQ, INSTANCE,
         kv="allocation info",
         sampling_params="top_k (prepare_for_decode), request checks",
         return_logprob="refused per request", return_hidden_states="refused per request",
         custom_logit_processor="refused per request"),
    *_on(_REQ, INSTANCE, "<0.5.19", kv_committed_len="committed KV length (compat adapter 0.5.16: committed_len)"),
    *_on("sglang.srt.managers.schedule_batch.ReqKvInfo", FIELD, kv_allocated_len="allocated KV length"),
    *_on("sglang.srt.managers.schedule_batch.ReqKvInfo", FIELD, ">=0.5.19",
         kv_committed_len="committed KV length (compat adapter 0.5.19: committed_len)"),
    Symbol("sglang.srt.managers.scheduler.GenerationBatchResult", "the round's result (worker)"),
    _params("sglang.srt.managers.scheduler.GenerationBatchResult",
            "logits_output, next_token_ids, accept_lens, can_run_cuda_graph, next_draft_input, "
            "speculative_num_draft_tokens, new_seq_lens, extra_keep_alive_refs", "the round's result (worker)"),
    *_on("sglang.srt.managers.scheduler.GenerationBatchResult", FIELD,
         num_correct_drafts_per_req_cpu="host accept counts (metrics)"),
    *_on("sglang.srt.managers.scheduler.Scheduler", INSTANCE, server_args="reporter.scheduler.server_args (metrics)"),
    Symbol("sglang.srt.managers.scheduler_components.batch_result_processor."
           "SchedulerBatchResultProcessor._resolve_spec_v2_tokens", "worker hook: accept-length histogram"),
    *_on("sglang.srt.managers.scheduler_components.batch_result_processor.SchedulerBatchResultProcessor", INSTANCE,
         metrics_reporter="where the histogram lives (metrics)"),
    *_on("sglang.srt.managers.scheduler_components.batch_result_processor.SchedulerBatchResultProcessor", INSTANCE,
         "<0.5.19", server_args="DDTreeConfig (metrics; compat adapter 0.5.16: result_processor_server_args)"),
    Symbol("sglang.srt.managers.scheduler_components.metrics_reporter", "its logger writes the decode line (metrics)",
           MODULE),
    Symbol(f"{_REPORTER}.report_decode_stats", "worker hook: DDTREE decode log line"),
    *_on(_REPORTER, INSTANCE,
         is_stats_logging_rank="logs on this rank", current_scheduler_metrics_enabled="exports on this rank",
         forward_ct_decode="decode-log step", decode_log_interval="decode-log step", scheduler="its server_args",
         spec_num_accept_tokens="interval accept tokens", spec_num_forward_ct="interval rounds",
         stats="spec_accept_rate gauge value", metrics_collector="/metrics"),
    *_on("sglang.srt.observability.metrics_collector.SchedulerStats", FIELD, spec_accept_rate="depth rate (metrics)"),
    *_on("sglang.srt.observability.metrics_collector.SchedulerMetricsCollector", INSTANCE,
         labels="prometheus labels", spec_accept_rate="sglang:spec_accept_rate gauge"),
    Symbol("sglang.srt.managers.tokenizer_manager.TokenizerManager._calculate_spec_decoding_metrics",
           "worker hook: per-request accept rate"),
    *_on("sglang.srt.managers.tokenizer_manager.TokenizerManager", INSTANCE, server_args="is this DDTREE (metrics)"),
    # ---- sglang.srt.mem_cache: KV allocation and sizing ------------------------------------------------
    Symbol("sglang.srt.mem_cache.allocation.alloc_for_spec_decode", "KV reservation (info.prepare_for_decode)"),
    _params("sglang.srt.mem_cache.allocation.alloc_for_spec_decode",
            "tree_cache, req_to_token_pool, reqs, req_pool_indices, cur_kv_lens, cur_kv_lens_cpu, nxt_kv_lens, "
            "nxt_kv_lens_cpu, num_needed_tokens, batch", "KV reservation (info.prepare_for_decode)"),
    Symbol("sglang.srt.mem_cache.allocation_sizing.get_alloc_len_per_decode", "worker hook: KV sizing"),
    Symbol("sglang.srt.mem_cache.allocation_sizing.get_req_to_token_extra_context_len", "worker hook: row headroom"),
    _params("sglang.srt.mem_cache.allocation_sizing.get_alloc_len_per_decode", "server_args",
            "the worker hook passes it (0.5.16 family; 0.5.18 reads the published args)", "<0.5.18"),
    _params("sglang.srt.mem_cache.allocation_sizing.get_req_to_token_extra_context_len", "server_args",
            "the worker hook passes it (0.5.16 family; 0.5.18 reads the published args)", "<0.5.18"),
    *_on("sglang.srt.mem_cache.memory_pool.ReqToTokenPool", INSTANCE, req_to_token="[rows, width] KV slots"),
    *_on("sglang.srt.mem_cache.memory_pool.MHATokenToKVPool", MEMBER, move_kv_cache="COMMIT: target KV moves"),
    # ---- sglang.srt.model_executor: forward batch, runners, outputs ------------------------------------
    Symbol(f"{_FORWARD_INFO}.ForwardBatch", "the draft block forward (worker._draft)"),
    _params(f"{_FORWARD_INFO}.ForwardBatch",
            "forward_mode, batch_size, input_ids, req_pool_indices, seq_lens, out_cache_loc, seq_lens_sum, "
            "seq_lens_cpu, positions, input_embeds, spec_algorithm, spec_info, capture_hidden_mode",
            "the draft block forward (worker._draft)"),
    Symbol(f"{_FORWARD_INFO}.ForwardMode", "forward modes"),
    *_on(f"{_FORWARD_INFO}.ForwardMode", MEMBER,
         TARGET_VERIFY="the draft block forward", is_extend="prefill goes to upstream", is_idle="idle batches"),
    Symbol(f"{_FORWARD_INFO}.CaptureHiddenMode", "hidden-state capture modes"),
    *_on(f"{_FORWARD_INFO}.CaptureHiddenMode", MEMBER, FULL="verify captures the target's hidden states",
         NULL="draft forward captures none"),
    *_on(_MODEL_RUNNER, MEMBER, forward="the draft block forward (worker._draft)",
         _get_attention_backend="budget auto: an attention backend per bucket width (worker.widths)"),
    _params(f"{_MODEL_RUNNER}._get_attention_backend", "init_new_workspace", "budget auto: shared workspace"),
    *_on(_MODEL_RUNNER, INSTANCE,
         req_to_token_pool="KV slots", token_to_kv_pool="KV moves", model="target LM head / embeddings",
         model_config="vocab size, Mamba check", is_draft_worker="hooks: the draft runner keeps upstream's dummy",
         spec_algorithm="hooks: is this DDTREE", server_args="hooks: DDTreeConfig",
         attn_backend="budget auto: swapped to the round's bucket for its verify (worker.widths.VerifyWidths.active)",
         decode_cuda_graph_runner="budget auto: swapped likewise; its capture_bs seed the cost table",
         max_running_requests="budget auto: the largest batch the cost table covers",
         device="budget auto: GPU memory per bucket", gpu_id="budget auto: GPU memory per bucket",
         dtype="the verify's hidden-state dtype: the draft-KV append graphs' input buffer (draft_kv_graph)"),
    Symbol(_GRAPH_RUNNER, "budget auto: a target verify graph runner per bucket width (worker.widths)"),
    _params(_GRAPH_RUNNER, "model_runner, attn_backend, speculative_num_draft_tokens",
            "budget auto: a runner of that width on that bucket's backend (upstream's adaptive-steps pattern)"),
    *_on(_GRAPH_RUNNER, INSTANCE, capture_bs="budget auto: batch sizes of the cost table",
         backend="budget auto: its full-graph backend's captured graphs, replayed by the calibration"),
    *_on("sglang.srt.model_executor.runner_backend.full_cuda_graph_backend.FullCudaGraphBackend", INSTANCE,
         _graphs="budget auto: {ShapeKey: CUDAGraph} replayed by the start-up calibration (other graph backends: "
                 "no calibration, costs from observed rounds)"),
    Symbol("sglang.srt.utils.get_available_gpu_memory",
           "budget auto: graph memory per bucket width (log; graph_memory_short's guard)"),
    _params("sglang.srt.arg_groups.arg_utils.Arg", "type_parser", "--speculative-ddtree-budget: an int or auto"),
    *_on("sglang.srt.configs.model_config.ModelConfig", INSTANCE, hf_config="validation: hybrid check"),
    *_on("sglang.srt.model_executor.model_runner.ModelRunnerOutput", FIELD,
         logits_output="draft hidden states", can_run_graph="the top-K head ran in the graph"),
    *_on("sglang.srt.managers.tp_worker.TpModelWorker", MEMBER,
         model_runner="target model runner", forward_batch_generation="the verify forward (worker._verify)"),
    _params("sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation",
            "batch, forward_batch, is_verify, skip_attn_backend_init", "the verify forward (worker._verify)"),
    *_on("sglang.srt.layers.logits_processor.LogitsProcessorOutput", FIELD,
         next_token_logits="verify logits (sampling)", hidden_states="target hidden states for the draft KV"),
    *_on("sglang.srt.layers.logits_processor.LogitsProcessor", INSTANCE, ">=0.5.23",
         defer_verify_gather="compat adapter 0.5.23: turned off again (DDTREE's verify reads whole logits rows)"),
    *_on(_WORKER, INSTANCE, ">=0.5.23",
         _target_logits_processor="compat adapter 0.5.23: the processor DFlashWorkerV2.__init__ deferred"),
    Symbol(f"{_GRAPH_RUNNER}.get_spec_info", "worker hook: capture dummy with the tree mask"),
    *_on(_GRAPH_RUNNER, INSTANCE,
         model_runner="hooks: which runner", captured_req_width="hooks: tokens per request",
         buffers="hooks: the mask buffer"),
    *_on("sglang.srt.model_executor.runner_utils.buffers.DecodeInputBuffers", FIELD, custom_mask="tree mask buffer"),
    # ---- DDTREE's host-sync-free flashinfer plan (worker.flashinfer_plan; on by default with flashinfer 0.6.14, i.e.
    # on 0.5.16; elsewhere off, and SGLANG_DDTREE_FLASHINFER_PLAN=1 is refused at validation) ----------------------
    Symbol(_FI_PREFILL, "flashinfer_plan: the class whose call_begin_forward is hooked"),
    Symbol(f"{_FI_PREFILL}.call_begin_forward", "flashinfer_plan hook (worker.hooks.FLASHINFER_HOOK_TARGETS)", MEMBER,
           "<0.5.17"),
    _params(f"{_FI_PREFILL}.call_begin_forward",
            "wrapper_ragged, wrapper_paged, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, "
            "seq_lens, prefix_lens, kv_start_idx, kv_indptr, qo_indptr, use_ragged, spec_info",
            "flashinfer_plan hook: the positional order it passes on", "<0.5.17"),
    _params(f"{_FI_PREFILL}.call_begin_forward", "seq_lens_cpu", "flashinfer_plan hook: the host lengths it plans with",
            "<0.5.17"),
    *_on(_FI_PREFILL, INSTANCE, "<0.5.17",
         attn_backend="flashinfer_plan: the backend's dispatch and page size",
         req_to_token="flashinfer_plan: KV indices",
         kv_last_page_len="flashinfer_plan: last-page lengths (page 1)", num_qo_heads="flashinfer_plan: the schedule",
         num_kv_heads="flashinfer_plan: the schedule", head_dim="flashinfer_plan: the schedule"),
    *_on(_FI_BACKEND, INSTANCE, "<0.5.17", dispatch_reason="flashinfer_plan: single-wrapper backends only",
         page_size="flashinfer_plan: page_size 1 only"),
    _params(f"{_VERIFY_INPUT}.generate_attn_arg_prefill",
            "req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, req_to_token",
            "flashinfer_plan: the replay's device indptrs, KV indices and tree mask, as upstream's plan gets them",
            "<0.5.17"),
    # ---- fa3's tree verify through the fused tree-attention kernel (worker.fa3_tree) ---------------------
    Symbol(_FA3, "fa3_tree: is this backend fa3 (hook targets: worker.hooks.FA3_HOOK_TARGETS)"),
    Symbol(f"{_FA3}.forward_extend", "fa3_tree hook: the tree verify's attention"),
    Symbol(f"{_FA3}.init_cuda_graph_state", "fa3_tree hook: the static ancestor-bit buffer"),
    Symbol(f"{_FA3}._apply_cuda_graph_metadata", "fa3_tree hook: a DDTREE verify's graph metadata, prefix half only"),
    _params(f"{_FA3}._apply_cuda_graph_metadata",
            "bs, req_pool_indices, seq_lens, seq_lens_sum, encoder_lens, forward_mode, spec_info, seq_lens_cpu",
            "fa3_tree hook: the positional order it relies on (0.5.19 changed it: refused there)", "<0.5.19"),
    Symbol("sglang.kernels.ops.kvcache.trtllm_mha_page_table.build_trtllm_mha_page_table",
           "fa3_tree: the prefix page table, as upstream builds it (compat adapter 0.5.16)", ATTR, "<0.5.23"),
    _params("sglang.kernels.ops.kvcache.trtllm_mha_page_table.build_trtllm_mha_page_table",
            "req_to_token, req_pool_indices, cache_seqlens, page_table, page_size", "fa3_tree: the prefix page table",
            "<0.5.23"),
    Symbol("sglang.kernels.ops.attention.trtllm_mha_page_table.build_trtllm_mha_page_table",
           "fa3_tree: the prefix page table, as upstream builds it (compat adapter 0.5.23: moved)", ATTR, ">=0.5.23"),
    _params("sglang.kernels.ops.attention.trtllm_mha_page_table.build_trtllm_mha_page_table",
            "req_to_token, req_pool_indices, cache_seqlens, page_table, page_size", "fa3_tree: the prefix page table",
            ">=0.5.23"),
    *_on(_FA3, INSTANCE,
         topk="fa3_tree: cascade (topk > 1) backends only", speculative_num_draft_tokens="fa3_tree: N",
         device="fa3_tree: bit buffer", fa_impl_ver="fa3_tree: FA3 only; passed to the prefix call",
         use_mla="fa3_tree: MHA only", fa_skip_kv_cache="fa3_tree: KV cache layers only",
         kv_cache_dtype_str="fa3_tree: model-dtype KV cache only", kv_cache_is_mxfp8="fa3_tree: no mxfp8",
         has_local_attention="fa3_tree: no chunked-local attention", attn_cp_size="fa3_tree: no context parallel",
         use_sliding_window_kv_pool="fa3_tree: no SWA pool", forward_metadata="fa3_tree: the prefix call",
         token_to_kv_pool="fa3_tree: KV write and read", page_size="fa3_tree: KV cache view",
         flash_attn_with_kvcache="fa3_tree: the prefix call", num_splits="fa3_tree: the prefix call",
         has_swa="fa3_tree: no SWA metadata", max_context_len="fa3_tree: prefix metadata bound",
         req_to_token="fa3_tree: prefix page table",
         target_verify_metadata_topk_normal="fa3_tree: the prefix metadata of each captured batch size",
         forward_metadata_spec_decode_expand="fa3_tree: the expand metadata it leaves unbuilt (None)"),
    *_on(_FA3_METADATA, FIELD,
         page_table="fa3_tree: prefix call", cache_seqlens_int32="fa3_tree: prefix lengths",
         cu_seqlens_q="fa3_tree: prefix call", cu_seqlens_k="fa3_tree: prefix call",
         max_seq_len_q="fa3_tree: prefix call", swa_out_cache_loc="fa3_tree: KV write location",
         max_seq_len_k="fa3_tree: prefix metadata bound"),
    *_on("sglang.srt.layers.radix_attention.RadixAttention", INSTANCE,
         layer_id="fa3_tree: KV buffer", tp_q_head_num="fa3_tree: heads", tp_k_head_num="fa3_tree: heads",
         tp_v_head_num="fa3_tree: heads", head_dim="fa3_tree: head dim", v_head_dim="fa3_tree: head dim",
         scaling="fa3_tree: softmax scale", logit_cap="fa3_tree: no softcap",
         sliding_window_size="fa3_tree: no sliding window", is_cross_attention="fa3_tree: self-attention only",
         attn_type="fa3_tree: decoder only", k_scale="fa3_tree: KV write", v_scale="fa3_tree: KV write"),
    Symbol("sglang.srt.layers.radix_attention.AttentionType", "fa3_tree: decoder layers only"),
    *_on("sglang.srt.layers.radix_attention.AttentionType", MEMBER, DECODER="fa3_tree: decoder layers only"),
    Symbol("sglang.srt.mem_cache.memory_pool.KVWriteLoc", "fa3_tree: the KV write, as upstream's"),
    *_on("sglang.srt.layers.attention.hybrid_attn_backend.HybridAttnBackend", INSTANCE,
         decode_backend="fa3_tree: an fa3 decode backend inside", prefill_backend="fa3_tree: an fa3 prefill backend inside"),
    Symbol("sglang.srt.configs.hybrid_arch.mambaish_config", "is the target hybrid (worker/hybrid.py)"),
    # ---- hybrid Mamba/GDN targets: tree verify state and its commit (worker/hybrid.py, hybrid_args.py) -----
    Symbol("sglang.srt.configs.hybrid_arch.hybrid_gdn_config", "hybrid_args: Gated DeltaNet targets only"),
    Symbol("sglang.srt.configs.mamba_utils.mamba2_state_dtype", "hybrid_args: conv / SSM state dtypes"),
    *_on("sglang.srt.configs.mamba_utils.Mamba2StateDType", FIELD, conv="hybrid_args: conv state dtype",
         temporal="hybrid_args: SSM state dtype"),
    *_on("sglang.srt.configs.qwen3_next.Qwen3NextConfig", MEMBER, linear_layer_ids="hybrid_args: GDN layers",
         mamba2_cache_params="test: per-node bytes == upstream's mamba_cache_per_req"),
    *_on("sglang.srt.configs.mamba_utils.Mamba2CacheParams", MEMBER,
         mamba_cache_per_req="test: per-node bytes == upstream's"),
    Symbol("sglang.srt.utils.common.get_device_memory_capacity", "hybrid_args: the GPU's memory at validation"),
    Symbol("sglang.srt.arg_groups.overrides.mamba_extra_buffer_of", "hybrid_args: extra_buffer strategy resolved"),
    Symbol("sglang.srt.speculative.spec_utils.prepare_mamba_track_for_verify",
           "hybrid: radix track slots before the verify (as EAGLE / NGRAM)"),
    Symbol("sglang.srt.layers.attention.hybrid_linear_attn_backend.HybridLinearAttnBackend"
           ".update_mamba_state_after_mtp_verify", "hybrid COMMIT: the accepted node's state into the request slot"),
    _params("sglang.srt.layers.attention.hybrid_linear_attn_backend.HybridLinearAttnBackend"
            ".update_mamba_state_after_mtp_verify",
            "last_correct_step_indices, mamba_track_indices, mamba_steps_to_track, model", "hybrid COMMIT"),
    *_on("sglang.srt.layers.attention.hybrid_linear_attn_backend.MambaAttnBackendBase", INSTANCE,
         topk="hybrid: the tree path (topk > 1) reads retrieve_next_token / retrieve_next_sibling",
         forward_metadata="test (hybrid verify): the commit's destination slots",
         req_to_token_pool="test (hybrid verify): the commit's state pools"),
    *_on("sglang.srt.layers.attention.hybrid_linear_attn_backend.HybridLinearAttnBackend", INSTANCE,
         linear_attn_backend="test (hybrid verify): what update_mamba_state_after_mtp_verify reads"),
    *_on("sglang.srt.layers.attention.mamba.mamba2_metadata.ForwardMetadata", FIELD,
         mamba_cache_indices="hybrid COMMIT: destination = the verify's mamba slots (batch row i -> slot)"),
    *_on("sglang.srt.mem_cache.memory_pool.HybridReqToTokenPool", MEMBER,
         get_speculative_mamba2_params_all_layers="test (hybrid verify): the commit's state pools"),
    Symbol("sglang.kernels.ops.mamba.mamba_state_scatter_triton.scatter_mamba_states_after_mtp_verify",
           "hybrid COMMIT: dst[slot[i]] = src[i, step[i]] (through update_mamba_state_after_mtp_verify)"),
    *_on("sglang.srt.layers.attention.linear.gdn_backend.GDNAttnBackend", INSTANCE,
         verify_intermediate_state_indices="hybrid: per-node states indexed by batch row (an arange)"),
    *_on("sglang.srt.mem_cache.memory_pool.HybridReqToTokenPool", INSTANCE, mamba_pool="hybrid: measured state memory"),
    *_on("sglang.srt.mem_cache.memory_pool.MambaPool", INSTANCE, mamba_cache="hybrid: measured state memory",
         _intermediate_conv_window_phys="hybrid: measured conv-window memory"),
    *_on("sglang.srt.mem_cache.memory_pool.MambaPool.State", FIELD,  # SpeculativeState's base (nested class)
         temporal="test (hybrid verify): committed SSM states", conv="test (hybrid verify): committed conv states"),
    *_on("sglang.srt.mem_cache.memory_pool.MambaPool.SpeculativeState", FIELD,
         intermediate_ssm="hybrid: per-node SSM states [layers, slots, N, ...]",
         intermediate_conv_window="hybrid: per-node conv windows"),
    Symbol("sglang.kernels.ops.mamba.causal_conv1d_triton.causal_conv1d_update",
           "test (hybrid verify): upstream's tree conv, as GDNAttnBackend calls it"),
    _params("sglang.kernels.ops.mamba.causal_conv1d_triton.causal_conv1d_update",
            "conv_state_indices, intermediate_conv_window, intermediate_state_indices, retrieve_next_token, "
            "retrieve_next_sibling, retrieve_parent_token", "test (hybrid verify)"),
    # (moved to sglang.kernels.ops.attention.linear in 0.5.23; the hybrid tree verify is 0.5.16's, its test too)
    Symbol("sglang.kernels.ops.attention.fla.fused_sigmoid_gating_recurrent.fused_sigmoid_gating_delta_rule_update",
           "test (hybrid verify): upstream's GDN tree recurrence, as the triton GDN kernel calls it", ATTR, "<0.5.23"),
    _params("sglang.kernels.ops.attention.fla.fused_sigmoid_gating_recurrent.fused_sigmoid_gating_delta_rule_update",
            "initial_state_source, initial_state_indices, cu_seqlens, disable_state_update, "
            "intermediate_states_buffer, intermediate_state_indices, cache_steps, retrieve_parent_token",
            "test (hybrid verify)", "<0.5.23"),
    # ---- sglang.srt.distributed / layers: tensor parallelism and the LM head --------------------------
    Symbol("sglang.srt.distributed.get_tp_group", "vocab-parallel top-K head, TP broadcast of the acceptance"),
    *_on(_GROUP, INSTANCE, world_size="tp size", rank_in_group="the worker's TP rank (rank 0 logs)"),
    *_on(_GROUP, MEMBER, broadcast="rank 0's tree sampling (sampling)",
         all_gather_into_tensor="top-K shards (draft_head)"),
    *_on(f"{_VOCAB}.VocabParallelEmbedding", INSTANCE, shard_indices="vocab shard of the LM head (draft_head)"),
    *_on(f"{_VOCAB}.VocabParallelEmbeddingShardIndices", FIELD, org_vocab_start_index="first token id of the shard"),
    *_on(f"{_VOCAB}.VocabParallelEmbeddingShardIndices", MEMBER,
         num_org_elements="shard size (draft_head)", num_added_elements="added vocab: head refused (draft_head)"),
    # ---- sglang.srt.sampling / utils: the ACCEPT step ---------------------------------------------------
    *_on(_SAMPLING_INFO, FIELD,
         is_all_greedy="greedy or tree sampling", temperatures="tree sampling", top_ps="tree sampling",
         top_ks="tree sampling", need_top_p_sampling="tree sampling", need_top_k_sampling="tree sampling",
         acc_additive_penalties="verify logits", acc_scaling_penalties="verify logits", logit_bias="verify logits"),
    *_on(_SAMPLING_PARAMS, FIELD,
         top_k="greedy / top-k (request checks, prepare_for_decode)", min_p="refused when sampling",
         json_schema="refused", regex="refused", ebnf="refused", structural_tag="refused"),
    Symbol("sglang.srt.sampling.penaltylib.repetition_penalty.apply_scaling_penalties", "penalties (sampling)"),
    Symbol("sglang.srt.utils.async_probe.sanitize_nan_logits", "verify logits NaN check (sampling)"),
    # ---- the server's own modules (doctor.SERVER_MODULES imports them in a fresh interpreter) ------------
    Symbol("sglang.srt.entrypoints.http_server", "launch_server's HTTP server", MODULE),
    Symbol("sglang.srt.entrypoints.engine", "the engine", MODULE),
    Symbol("sglang.srt.managers.tokenizer_manager", "the tokenizer manager", MODULE),
    Symbol("sglang.srt.managers.scheduler", "the scheduler process", MODULE),
    Symbol("sglang.srt.managers.detokenizer_manager", "the detokenizer process", MODULE),
    Symbol("sglang.srt.model_executor.model_runner", "the model runner", MODULE),
    # ---- sgl_kernel (CUDA-only wheel) -----------------------------------------------------------------
    Symbol("sgl_kernel.top_k_renorm_prob", "plain decoding's joint filter (sampling)"),
    Symbol("sgl_kernel.top_p_renorm_prob", "plain decoding's joint filter (sampling)"),
)


# ---- listing ---------------------------------------------------------------------------------------
def symbols() -> List[Symbol]:
    """``UPSTREAM_SYMBOLS`` as Symbols (a plain ``(path, purpose)`` tuple is an ATTR entry), every family's."""
    return [Symbol(*entry) for entry in UPSTREAM_SYMBOLS]


def applies(sym: Symbol, version: str) -> bool:
    """Whether release ``version`` should have ``sym`` (its ``releases`` specifier; "" = every release)."""
    if not sym.releases:
        return True
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(sym.releases).contains(version, prereleases=True)


def symbols_for(version: Optional[str]) -> List[Symbol]:
    """The entries release ``version`` should have (every entry when ``version`` is None)."""
    return [sym for sym in symbols() if version is None or applies(sym, version)]


def installed_symbols() -> List[Symbol]:
    """The entries the installed SGLang release should have."""
    from sglang_ddtree.compat.release import _installed_version

    return symbols_for(_installed_version())


def unchecked_upstream_symbols() -> List[Tuple[str, str, str]]:
    """(path, purpose, reason) of the installed release's symbols not checked in this environment
    (``OWN_CHECK_PACKAGES``)."""
    out = []
    for sym in installed_symbols():
        reason = _absent_package(sym)
        if reason:
            out.append((sym.path, sym.purpose, reason))
    return out


def missing_upstream_symbols() -> List[Tuple[str, str, str]]:
    """(path, purpose, error) for every symbol of the installed release that does not resolve in this
    environment (symbols of a package that is not installed at all: see ``unchecked_upstream_symbols``)."""
    missing = []
    for sym in installed_symbols():
        if _absent_package(sym):
            continue
        try:
            check_symbol(sym)
        except Exception as e:  # report every failure kind: missing module, attribute, broken import
            missing.append((sym.path, sym.purpose, f"{type(e).__name__}: {e}"))
    return missing


def counts_by_kind() -> Dict[str, int]:
    counts = dict.fromkeys(KINDS, 0)
    for sym in symbols():
        counts[sym.kind] += 1
    return counts
