"""Adapter of the SGLang 0.5.23 family (0.5.23): deferred verify gather; the trtllm_mha page table moved.

``DFlashWorkerV2.__init__`` marks the target's ``LogitsProcessor`` ``defer_verify_gather``: under TP > 1 a
target-verify forward may then return a vocab shard of the logits, which only DFLASH's own verify finishes
(``finish_deferred_gather`` / ``deferred_argmax``). DDTREE's verify reads whole rows, so its worker turns the
deferral off again (the processor gathers as before 0.5.23). ``build_trtllm_mha_page_table`` moved from
``sglang.kernels.ops.kvcache`` to ``sglang.kernels.ops.attention``.
"""

from __future__ import annotations

from typing import Callable

from sglang_ddtree.compat import sglang_0_5_22


class Adapter(sglang_0_5_22.Adapter):
    family = "0.5.23"

    def init_dflash_worker(self, init: Callable, draft_server_args, config, gpu_id, ps, nccl_port, target_worker):
        super().init_dflash_worker(init, draft_server_args, config, gpu_id, ps, nccl_port, target_worker)
        worker = init.__self__  # the DDTREE worker whose DFlashWorkerV2.__init__ just ran
        processor = getattr(worker, "_target_logits_processor", None)  # None: not exactly one processor found
        if processor is not None:
            processor.defer_verify_gather = False

    def build_trtllm_mha_page_table(self, **kwargs) -> None:
        from sglang.kernels.ops.attention.trtllm_mha_page_table import build_trtllm_mha_page_table

        build_trtllm_mha_page_table(**kwargs)
