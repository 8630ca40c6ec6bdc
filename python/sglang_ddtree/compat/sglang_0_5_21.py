"""Adapter of the SGLang 0.5.21 family (0.5.21): the DFLASH worker no longer takes the parallel state.

``DFlashWorkerV2.__init__`` drops ``ps`` (and its ``.ps`` attribute): the scheduler builds the draft worker from
``server_args, gpu_id, nccl_port, target_worker`` and parallel ranks come from the runtime context. DDTREE's worker
takes ``ps`` as an optional keyword and reads its TP rank from the TP group on every release.
"""

from __future__ import annotations

from typing import Callable

from sglang_ddtree.compat import sglang_0_5_20


class Adapter(sglang_0_5_20.Adapter):
    family = "0.5.21"

    def init_dflash_worker(self, init: Callable, draft_server_args, config, gpu_id, ps, nccl_port, target_worker):
        assert ps is None, "sglang 0.5.21 passes the draft worker no parallel state"
        with self.drafter_widths(config):
            init(draft_server_args, gpu_id, nccl_port, target_worker)
