"""Adapter of the SGLang 0.5.16 family (0.5.16): the baseline the rest of the package is written against.

Runners read their widths from their own ``server_args``; the hooked upstream functions take the
``server_args`` they size for; ``ServerArgs.override`` is the sanctioned write to a resolved copy. Later
families subclass ``Adapter`` and override only what their releases changed (``compat.release``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable, Dict


class Adapter:
    family = "0.5.16"
    # Whether upstream's backends, graph runners and the scheduler's reporters read the speculative widths
    # from the process-wide ``get_spec()`` namespace (published from the target's server args) instead of
    # the server_args object they were given.
    reads_spec_process_wide = False
    # Whether upstream DFLASH's prefill is 0.5.16's (two blocking list-to-device copies), which
    # ``worker.prefill`` can stand in for under SGLANG_DDTREE_PREFILL_ASYNC=1; later families keep upstream's.
    own_prefill = True

    def __init__(self, version: str):
        self.version = version

    @property
    def budget_auto(self) -> bool:
        """Whether budget auto runs here (and so is the default where ``validation.auto_default_unverified``
        allows): its per-width verify backends read the width from their own server args, so not where upstream's
        backends read it process-wide."""
        return not self.reads_spec_process_wide

    def __repr__(self) -> str:
        return f"<sglang_ddtree.compat adapter {self.family} for sglang {self.version}>"

    # ---- hooks (worker.hooks writes every hook against 0.5.16's signatures) ----------------------------
    def adapt_hook(self, target: str, hook: Callable) -> Callable:
        """``hook`` (an AROUND hook written for 0.5.16's signature of ``target``) as this release must
        receive it."""
        return hook

    # ---- server args ---------------------------------------------------------------------------------
    def server_args_record(self, cls):
        """Make ``cls`` (``class X(ServerArgs)`` whose body annotates extra fields) a record type upstream reads
        fields, CLI flags and ``Engine`` keyword arguments from. Here ``ServerArgs`` is a dataclass: so is ``cls``."""
        return dataclasses.dataclass(cls)

    def resolved(self, server_args):
        """An object whose attributes are the resolution result of ``server_args`` (a record, the stand-in a
        resolver is handed, or a plain object). Here resolution writes the record's fields: the record itself."""
        return server_args

    def write_fields(self, server_args, source: str, fields: Dict[str, object]) -> None:
        """Set ``fields`` on a resolved copy of the server args (the drafter's view, ``worker.draft_view``);
        a plain object (CPU tests) gets plain attributes."""
        override = getattr(server_args, "override", None)
        if override is not None:
            override(source, **fields)
        else:
            for name, value in fields.items():
                setattr(server_args, name, value)

    def resolve_fields(self, server_args, source: str, fields: Dict[str, object]) -> None:
        """Record DDTREE's resolution of ``fields`` (named ``source``) on server args that upstream is resolving
        (``DDTreeSpecAlgo.handle_server_args``). Here the record's fields are the resolution result: plain
        writes."""
        for name, value in fields.items():
            setattr(server_args, name, value)

    def resolve(self, server_args) -> None:
        """Resolve server args just constructed (``prepare_server_args``, ``Engine.server_args_class(**kw)``) as
        the launcher does before it reads them; DDTREE validation runs here. Here construction resolves
        (``ServerArgs.__post_init__``): nothing left to do."""

    def attention_dp_flag(self, view):
        """The flag that turned attention data parallelism on in resolved server args ``view`` (None when off),
        as validation names it in its refusal."""
        return "--enable-dp-attention" if view.enable_dp_attention else None

    # ---- the drafter (worker.worker) -----------------------------------------------------------------
    def init_dflash_worker(self, init: Callable, draft_server_args, config, gpu_id, ps, nccl_port, target_worker):
        """``DFlashWorkerV2.__init__`` (``init``, bound) with the drafter's view of the server args and the
        drafter's widths in force (``drafter_widths``)."""
        with self.drafter_widths(config):
            init(draft_server_args, gpu_id, ps, nccl_port, target_worker)

    def drafter_widths(self, config):
        """A scope in which upstream code reading the speculative widths sees the drafter's (block size L,
        topk 1) instead of the target's (budget + 1, topk K). Here the draft runner reads its own copy of the
        server args (``worker.draft_view``): nothing to do."""
        return contextlib.nullcontext()

    # ---- KV lengths (worker.info, worker.worker) ------------------------------------------------------
    def committed_len(self, req) -> int:
        """Tokens of ``req`` (an upstream ``Req``) whose KV is committed."""
        return int(req.kv_committed_len)

    def record_reserved_lens(self, draft_input, lens_cpu, lens_sum: int) -> None:
        """Store the round's reserved KV lengths (host ``[bs]`` int64 and their sum) on the draft input, where
        upstream's scheduler reads them."""
        draft_input.reserved_seq_lens_cpu = lens_cpu
        draft_input.reserved_seq_lens_sum = lens_sum

    def reserved_lens_cpu(self, draft_input):
        """The host reserved lengths ``record_reserved_lens`` stored (None before the first decode)."""
        return draft_input.reserved_seq_lens_cpu

    # ---- the scheduler's objects (worker.metrics, validation) -----------------------------------------
    def result_processor_server_args(self, processor):
        """The server args a ``SchedulerBatchResultProcessor`` serves."""
        return processor.server_args

    def target_model_config(self, server_args):
        """Upstream's ``ModelConfig`` of the target (raises where upstream cannot read it)."""
        return server_args.get_model_config()

    # ---- fa3's fused tree attention (worker.fa3_tree) ----------------------------------------------------
    def build_trtllm_mha_page_table(self, **kwargs) -> None:
        """Upstream's page-table builder fa3 uses for its prefix metadata (keyword arguments as upstream's)."""
        from sglang.kernels.ops.kvcache.trtllm_mha_page_table import build_trtllm_mha_page_table

        build_trtllm_mha_page_table(**kwargs)

    # ---- features a release cannot carry ----------------------------------------------------------------
    def refused_features(self) -> Dict[str, str]:
        """{switch: why this release cannot honour it} for DDTREE features (validation refuses a set one)."""
        return {}
