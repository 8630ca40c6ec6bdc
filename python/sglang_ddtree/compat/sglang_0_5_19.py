"""Adapter of the SGLang 0.5.19 family (0.5.19): resolution by declaration, KV-length renames, scheduler
objects without server_args.

Construction no longer resolves: ``ServerArgs.resolve_once`` (the launcher, ``Engine``, ``publish``) runs the
pipeline, whose handlers DECLARE their decisions in the record's stash (last writer wins) and leave the fields
at the raw input; the config bags (``get_spec()``) and ``resolution_result`` are projected from the stash. So
DDTREE declares its resolved fields after ``_handle_dflash``'s declarations (which would otherwise win with
the drafter's widths) and also writes them on the record, which DDTREE and upstream's remaining field
reads see.

``req.kv_committed_len`` moves to ``req.kv.kv_committed_len``; the draft input's ``reserved_seq_lens_cpu /
_sum`` become ``nxt_kv_lens_cpu / _sum``; ``SchedulerBatchResultProcessor.server_args`` and
``ServerArgs.get_model_config`` are gone (the published args and ``ModelConfig.from_server_args`` stand in);
a resolved ``ServerArgs`` refuses attribute writes and the pipeline's field writer is gone (the drafter's copy
is written past the guard and declares its widths in its own stash). fa3's
``_apply_cuda_graph_metadata`` drops ``seq_lens_sum`` and gains ``out_cache_loc``, so DDTREE's fused fa3 tree
attention (written against the older parameters) is refused here.
"""

from __future__ import annotations

from typing import Dict

from sglang_ddtree.compat import sglang_0_5_18


class Adapter(sglang_0_5_18.Adapter):
    family = "0.5.19"

    def resolve_fields(self, server_args, source: str, fields: Dict[str, object]) -> None:
        from sglang.srt.arg_groups.overrides import declare_resolution

        declare_resolution(server_args, source, **fields)
        # On the record too (DDTreeConfig.from_server_args reads it). declare_direct_writes, which wraps
        # handle_server_args, records no direct-write entry for a field declared inside the call: the record and
        # the stash carry the same values.
        for name, value in fields.items():
            setattr(server_args, name, value)

    def resolve(self, server_args) -> None:
        server_args.resolve_once()

    def write_fields(self, server_args, source: str, fields: Dict[str, object]) -> None:
        # The drafter's private copy (worker.draft_view), never the published record: the read-only guard
        # is ServerArgs.__setattr__, which object.__setattr__ does not run. The copy's own stash declares the
        # drafter's widths too, so upstream's readers of the resolution (resolving_view, e.g.
        # resolve_max_speculative_num_draft_tokens) see them rather than the target's declared ones.
        from sglang.srt.arg_groups.overrides import declare_resolution

        declare_resolution(server_args, source, **fields)
        for name, value in fields.items():
            object.__setattr__(server_args, name, value)

    def committed_len(self, req) -> int:
        return int(req.kv.kv_committed_len)

    def record_reserved_lens(self, draft_input, lens_cpu, lens_sum: int) -> None:
        draft_input.nxt_kv_lens_cpu = lens_cpu
        draft_input.nxt_kv_lens_sum = lens_sum

    def reserved_lens_cpu(self, draft_input):
        return draft_input.nxt_kv_lens_cpu

    def result_processor_server_args(self, processor):
        from sglang.srt.runtime_context import get_server_args

        return get_server_args()

    def target_model_config(self, server_args):
        from sglang.srt.configs.model_config import ModelConfig

        return ModelConfig.from_server_args(server_args)

    def refused_features(self) -> Dict[str, str]:
        from sglang_ddtree.worker.fa3_tree import ENV

        return {ENV: "FlashAttentionBackend._apply_cuda_graph_metadata changed its parameters in sglang 0.5.19 "
                     "(seq_lens_sum dropped, out_cache_loc added)"}
