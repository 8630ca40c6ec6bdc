"""The SpecInput dataclasses a DDTree round carries (DRAFT state between rounds, VERIFY input).

``DDTreeDraftInput`` is what the scheduler keeps on the running batch between rounds: the bonus
token of each request (relayed through the overlap future map) plus the KV reservation done before
each round. ``DDTreeVerifyInput`` is the target's verify input: DFLASH's verify input (same
attention-backend paths) plus the tree topology SGLang's EAGLE/NGRAM tree verify reads
(FULL_MASK custom mask, tree positions, ``retrieve_*`` arrays), so ``eagle_sample`` can accept on it.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
import torch

from sglang.srt.mem_cache.allocation import alloc_for_spec_decode
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.runtime_context import get_server_args
from sglang.srt.speculative.dflash_info import DFlashVerifyInput
from sglang.srt.speculative.dflash_info_v2 import DFlashDraftInputV2

from sglang_ddtree.compat import adapter
from sglang_ddtree.config import DDTreeConfig


@dataclasses.dataclass
class DDTreeDraftInput(DFlashDraftInputV2):
    """Draft-side state carried across rounds (spec-v2), with DDTree's KV reservation."""

    def prepare_for_decode(self, batch) -> None:
        """Reserve KV slots for the next round (host loop over requests, like upstream's).

        Runs on the scheduler before the round. Reads each request's committed and allocated lengths and keeps
        ``allocated >= committed + DDTreeConfig.reserve_per_decode`` (capped at the req_to_token row width), what a
        round may write. A request that falls short tops up by one more reserve beyond that (``topped_up_len``), so
        most rounds allocate nothing and skip the allocator, its two copies, its kernel and its per-request loop (a
        width-0 round commits one token, so it used to allocate one slot per request every round).
        Where the allocator's free slots would not cover the top-up, the round reserves exactly what it needs (as
        upstream's decode memory check counts it). Records the host bounds the round uses for planning. The config
        comes from the process's published (target) server args, as upstream DFLASH reads its block size there.
        """
        bs = batch.batch_size()
        if bs == 0:
            return
        reserve = DDTreeConfig.from_server_args(get_server_args()).reserve_per_decode
        lens = adapter()
        self._ensure_prepare_length_buffers(bs, batch.device)
        committed_cpu = self._prepare_batch_seq_lens_cpu_buf[:bs]
        cur_cpu = self._prepare_cur_kv_lens_cpu_buf[:bs]
        nxt_cpu = self._prepare_nxt_kv_lens_cpu_buf[:bs]
        row_width = int(batch.req_to_token_pool.req_to_token.shape[1])
        committed_sum = reserved_sum = needed = short = 0
        max_top_k, top_ks = 1, set()
        # written through NumPy views of the host buffers: torch element writes go through the dispatcher (three
        # per request took 403-514 us for 48 requests on the development machine's CPU, NumPy 6-13 us; the loop
        # alone, benchmark/results/session19/host_writes_loop.json)
        committed_np, cur_np, nxt_np = committed_cpu.numpy(), cur_cpu.numpy(), nxt_cpu.numpy()
        for i, req in enumerate(batch.reqs):
            committed = lens.committed_len(req)
            allocated = int(req.kv.kv_allocated_len)
            floor = min(committed + reserve, row_width)  # what the round may write up to
            if allocated >= floor:
                reserved = allocated
            else:
                reserved = topped_up_len(committed, reserve, row_width)
                short += floor - allocated
            committed_np[i], cur_np[i], nxt_np[i] = committed, allocated, reserved
            committed_sum += committed
            reserved_sum += reserved
            needed += reserved - allocated
            top_k = int(req.sampling_params.top_k)
            max_top_k = max(max_top_k, top_k)
            top_ks.add(top_k)
        self.max_top_k = max_top_k
        self.uniform_top_k_value = next(iter(top_ks)) if len(top_ks) == 1 else None

        allocator = batch.token_to_kv_pool_allocator
        if needed > short and needed + bs * allocator.page_size > allocator.available_size():
            # no room for the top-ups (with a page of slack per request for a paged pool's rounding): exactly what
            # this round may write, max(allocated, floor)
            np.maximum(cur_np, np.minimum(committed_np + reserve, row_width), out=nxt_np)
            needed, reserved_sum = short, int(nxt_np.sum())
        if needed:
            cur_gpu = self._prepare_cur_kv_lens_gpu_buf[:bs]
            nxt_gpu = self._prepare_nxt_kv_lens_gpu_buf[:bs]
            cur_gpu.copy_(cur_cpu, non_blocking=True)
            nxt_gpu.copy_(nxt_cpu, non_blocking=True)
            alloc_for_spec_decode(
                batch.tree_cache,
                batch.req_to_token_pool,
                reqs=batch.reqs,
                req_pool_indices=batch.req_pool_indices,
                cur_kv_lens=cur_gpu,
                cur_kv_lens_cpu=cur_cpu,
                nxt_kv_lens=nxt_gpu,
                nxt_kv_lens_cpu=nxt_cpu,
                num_needed_tokens=needed,
                batch=batch,
            )
        # else every request's allocation already covers this round: nothing to allocate or write (upstream's call
        # would only re-set each request's allocated length to itself)
        batch.seq_lens_cpu = committed_cpu
        batch.seq_lens_sum = committed_sum
        lens.record_reserved_lens(self, nxt_cpu, reserved_sum)


def topped_up_len(committed: int, reserve: int, row_width: int) -> int:
    """The allocated length a request tops up to when it no longer covers ``committed + reserve``: one reserve
    further, capped at the req_to_token row width (its next top-up comes after it commits ~``reserve`` tokens)."""
    return min(committed + 2 * reserve, row_width)


def make_draft_input(bonus_tokens: torch.Tensor, new_seq_lens: torch.Tensor) -> DDTreeDraftInput:
    """Shape: bonus_tokens [bs] int, new_seq_lens [bs] int -> the state for the next round."""
    bs = int(new_seq_lens.numel())
    device = bonus_tokens.device
    return DDTreeDraftInput(
        topk_p=torch.empty((bs, 0), device=device, dtype=torch.float32),
        topk_index=torch.empty((bs, 0), device=device, dtype=torch.int64),
        bonus_tokens=bonus_tokens.to(torch.int64),
        new_seq_lens=new_seq_lens.to(torch.int64),
        hidden_states=torch.empty((bs, 0), device=device, dtype=torch.float16),
    )


@dataclasses.dataclass
class DDTreeVerifyInput(DFlashVerifyInput):
    """Target verify input of a DDTree round (N = budget + 1 tokens per request).

    Inherited: draft_token [bs*N] int64 (tree tokens, root first), positions [bs*N] int64
    (prefix + depth), draft_token_num = N, topk = K (backends that gate tree handling on topk > 1),
    custom_mask (FULL_MASK, see ``tree_api.verify_topology``), capture_hidden_mode FULL.
    """

    retrieve_index: Optional[torch.Tensor] = None  # [bs, N] int64, b * N + row
    retrieve_next_token: Optional[torch.Tensor] = None  # [bs, N] int64, first child, -1 none
    retrieve_next_sibling: Optional[torch.Tensor] = None  # [bs, N] int64, next sibling, -1 none
    max_depth: int = 0  # D = DDTreeConfig.max_depth: deepest possible node
    draft_probs: Optional[torch.Tensor] = None  # read by upstream's verify paths; T > 0 draws need none
    tree_bits: Optional[torch.Tensor] = None  # [bs*N, NW] int32 ancestor bits: fa3's fused tree attention (fa3_tree)
    grammar: Optional[object] = None  # grammar-constrained decoding is rejected per request

    @property
    def max_tree_depth(self) -> int:
        """W = D + 1 (``DDTreeConfig.accept_width``): width of the sampler's accept_index rows."""
        return self.max_depth + 1

    @property
    def tree_topk(self) -> int:
        """-1: irregular tree (no fixed per-level branching)."""
        return -1


def make_capture_verify_input(config: DDTreeConfig, *, num_tokens_per_req: int, custom_mask: torch.Tensor):
    """The dummy verify input for the target's CUDA-graph capture and warm-up: it must carry a
    custom mask so the captured attention reads the tree mask buffer at replay. ``num_tokens_per_req``
    is the runner's captured width (``config.num_verify_tokens``)."""
    return DDTreeVerifyInput(
        draft_token=None,
        positions=None,
        draft_token_num=int(num_tokens_per_req),
        topk=config.topk,
        custom_mask=custom_mask,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        max_depth=config.max_depth,
    )
