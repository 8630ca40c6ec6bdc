"""Top-K draft tokens and log-probs per block position (DRAFT step of the round).

A DFlash drafter has no head of its own: it borrows the target's LM head. DFLASH takes the argmax of
each block position; DDTree needs the K most likely tokens of positions 1..L-1 and their
log-probabilities (tree scores are sums of these). With a vocab-parallel head each rank reduces its
shard to (top-K, logsumexp) and the ranks merge K * tp candidates, so no rank holds dense logits of
the full vocabulary. Within a rank the LM-head matmul forms a [chunk, V / tp] logits tile (chunked over
tokens, in the weight's dtype) that ``kernels.topk_lse`` reduces to (top-K, logsumexp) in one read.
The head runs inside the draft CUDA graph (tp == 1) through upstream's capture-tail hook, writing
static output buffers the worker reads after replay; ``compute`` is the eager path.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

_CHUNK_TOKENS = 256


# The draft head's top-K pass: ``threshold`` (only the slices that can hold a row's top-K take their K rounds; two
# launches more) or ``all`` (every slice's). The same values, ids and tie order either way. Its launch: slices of
# ``HEAD_BLOCK`` columns, ``HEAD_WARPS`` warps. Session 29 on the H200 timed the head as the draft graph runs it
# (CUDA-graph replays; ``benchmark/results/session29/topk_lse.json``, us a launch at vocab 151936, K 8): the
# threshold pass at 2048 x 4 was the fastest of six launches at every row count, 15 to 256 rows (18.2 / 22.5 / 28.5
# / 41.3 / 72.5 at 15 / 30 / 60 / 120 / 256 rows, against every slice's pass at 4096 x 8: 18.8 / 27.6 / 47.3 /
# 84.0 / 172.8). Sessions 25-27 had put the cutoff at 100 rows from per-launch timings, which measured the host's
# four launches (~100 us), not the graph's kernels. ``SGLANG_DDTREE_TOPK_THRESHOLD``: 1 or unset the threshold pass
# (default), 0 every slice's at 4096 x 8 (the launch before session 29).
TOPK_THRESHOLD_ENV = "SGLANG_DDTREE_TOPK_THRESHOLD"
HEAD_BLOCK, HEAD_WARPS = 2048, 4


def topk_select() -> str:
    """The ``select`` the draft head's ``topk_lse`` uses, from ``TOPK_THRESHOLD_ENV``: ``threshold`` unless 0."""
    from sglang_ddtree.config import env_switch

    on = env_switch(TOPK_THRESHOLD_ENV, on="the threshold top-K pass (default)", off="every slice's top-K",
                    default=True)
    return "threshold" if on else "all"


def describe_select(select: str) -> str:
    """One phrase for the start-up log: which top-K pass the draft head's launches take."""
    if select == "threshold":
        return f"threshold pass, {HEAD_BLOCK} x {HEAD_WARPS} ({TOPK_THRESHOLD_ENV}=0: every slice's)"
    return f"every slice's pass, 4096 x 8 ({TOPK_THRESHOLD_ENV}=0)"


def head_launch(select: str) -> dict:
    """``topk_lse``'s launch keywords for the draft head's ``select``."""
    if select == "threshold":
        return dict(select="threshold", block=HEAD_BLOCK, num_warps=HEAD_WARPS)
    return dict(select="all", block=4096, num_warps=8)


def topk_logprobs_local(
    hidden: torch.Tensor, weight: torch.Tensor, topk: int, vocab_start: int = 0, select: str = "all"
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One rank's share of the draft distribution.

    Shape: hidden [T, H] (any float dtype; cast to the weight's), weight [V_local, H].
    Returns (top logits [T, K] float32, global token ids [T, K] int64, logsumexp [T] float32).
    ``select``: the draft head's pass (``head_launch``: its block and warps come with it).
    """
    out_val = torch.empty((hidden.shape[0], topk), dtype=torch.float32, device=hidden.device)
    out_ids = torch.empty((hidden.shape[0], topk), dtype=torch.int64, device=hidden.device)
    out_lse = torch.empty((hidden.shape[0],), dtype=torch.float32, device=hidden.device)
    for start in range(0, hidden.shape[0], _CHUNK_TOKENS):
        end = min(hidden.shape[0], start + _CHUNK_TOKENS)
        logits = torch.matmul(hidden[start:end].to(weight.dtype), weight.T)
        topk_lse(logits, topk, out_val[start:end], out_ids[start:end], out_lse[start:end], **head_launch(select))
    if vocab_start:
        out_ids += vocab_start
    return out_val, out_ids, out_lse


TOPK_SELECTS = ("all", "threshold")


def topk_lse(logits: torch.Tensor, topk: int, out_val: torch.Tensor, out_ids: torch.Tensor, out_lse: torch.Tensor,
             *, backend: str = "auto", block: int = 4096, num_warps: Optional[int] = None,
             select: str = "all") -> None:
    """Each row's K largest logits (descending, float32), their column ids (int64) and its logsumexp
    (float32), written into the out tensors. Shape: logits [T, V] (any float dtype, rows contiguous),
    out_val / out_ids [T, K], out_lse [T]. ``kernels.topk_lse`` on CUDA (reads the logits once; equal values:
    the lower column first), PyTorch elsewhere. ``backend``: auto | triton | torch. ``block`` (columns per
    program) and ``num_warps`` (default 8 from block 2048 up, else 4) are the slice kernel's launch
    configuration; ``benchmark/bench_topk_lse.py`` times the choices. ``select``: ``all`` (every slice takes
    its top-K) or ``threshold`` (only slices whose max reaches the row's K-th largest slice max do; same result, two
    launches more; ``kernels/topk_lse.py``; the draft head's default, see ``TOPK_THRESHOLD_ENV``)."""
    from sglang_ddtree.tree._common import next_pow2, use_triton

    if select not in TOPK_SELECTS:
        raise ValueError(f"select must be one of {TOPK_SELECTS}, got {select!r}")
    rows, vocab = logits.shape
    if rows == 0:
        return
    if not use_triton("draft top-K head", logits.device, backend):
        wide = logits.float()
        val, idx = wide.topk(topk, dim=-1)
        out_val.copy_(val)
        out_ids.copy_(idx)
        out_lse.copy_(torch.logsumexp(wide, dim=-1))
        return
    from sglang_ddtree.worker.kernels import topk_lse as kernels

    logits = logits if logits.stride(1) == 1 else logits.contiguous()
    slices = -(-vocab // block)
    dev = logits.device
    warps = num_warps or (8 if block >= 2048 else 4)
    s_val = torch.empty((rows, slices, topk), dtype=torch.float32, device=dev)
    s_idx = torch.empty((rows, slices, topk), dtype=torch.int64, device=dev)
    s_max = torch.empty((rows, slices), dtype=torch.float32, device=dev)
    s_sum = torch.empty((rows, slices), dtype=torch.float32, device=dev)
    if select == "all":
        kernels.topk_lse_slices_kernel[(rows, slices)](logits, logits.stride(0), vocab, s_val, s_idx, s_max, s_sum,
                                                       slices, K=topk, BLOCK=block, num_warps=warps)
    else:
        thresh = torch.empty((rows,), dtype=torch.float32, device=dev)
        kernels.topk_lse_stats_kernel[(rows, slices)](logits, logits.stride(0), vocab, s_max, s_sum, slices,
                                                      BLOCK=block, num_warps=warps)
        kernels.topk_lse_threshold_kernel[(rows,)](s_max, thresh, slices, K=topk, BLOCK_S=next_pow2(slices),
                                                   num_warps=4)
        kernels.topk_lse_select_kernel[(rows, slices)](logits, logits.stride(0), vocab, s_max, thresh, s_val, s_idx,
                                                       slices, K=topk, BLOCK=block, num_warps=warps)
    merged_val = out_val if out_val.is_contiguous() else torch.empty_like(out_val)
    merged_ids = out_ids if out_ids.is_contiguous() else torch.empty_like(out_ids)
    merged_lse = out_lse if out_lse.is_contiguous() else torch.empty_like(out_lse)
    kernels.topk_lse_merge_kernel[(rows,)](s_val, s_idx, s_max, s_sum, merged_val, merged_ids, merged_lse, slices,
                                           K=topk, BLOCK_C=next_pow2(slices * topk), BLOCK_S=next_pow2(slices),
                                           num_warps=4)
    for out, got in ((out_val, merged_val), (out_ids, merged_ids), (out_lse, merged_lse)):
        if out is not got:
            out.copy_(got)


def merge_vocab_shards(
    val: torch.Tensor, ids: torch.Tensor, lse: torch.Tensor, topk: int
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Merge per-rank shares gathered along a leading rank dim.

    Shape: val [tp, T, K] float32, ids [tp, T, K] int64, lse [tp, T] float32.
    Returns (log-probs [T, K] float32 sorted descending, token ids [T, K] int64).
    Ties between ranks go to the lower rank (lower token ids), as a full-vocab top-K would.
    """
    tp, t, k = val.shape
    total_lse = torch.logsumexp(lse, dim=0)  # [T]
    flat_val = val.permute(1, 0, 2).reshape(t, tp * k)
    flat_ids = ids.permute(1, 0, 2).reshape(t, tp * k)
    top, pos = flat_val.topk(topk, dim=-1)
    return top - total_lse.unsqueeze(1), flat_ids.gather(1, pos)


class DraftTopKHead:
    """Callable(hidden_states, input_ids) for the draft runner's capture-tail hooks.

    hidden_states: [bs * L, H], the drafter's final hidden states of the whole block.
    Writes ``out_log_probs`` [max_bs * (L-1), K] float32 and ``out_ids`` [max_bs * (L-1), K] int64
    (rows = block positions 1..L-1 of each request, request-major).
    """

    def __init__(self, *, weight, block_size, topk, num_org, org_vocab_start, max_bs, tp_group=None):
        self.weight = weight[:num_org]
        self.block_size = int(block_size)
        self.topk = int(topk)
        self.org_vocab_start = int(org_vocab_start)
        self.tp_group = tp_group
        self.tp_size = int(tp_group.world_size) if tp_group is not None else 1
        self.select = topk_select()
        rows = int(max_bs) * (self.block_size - 1)
        self.out_log_probs = torch.empty((rows, self.topk), dtype=torch.float32, device=weight.device)
        self.out_ids = torch.empty((rows, self.topk), dtype=torch.int64, device=weight.device)

    def compute(self, hidden_states: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Eager path. Returns (log-probs [bs, L-1, K] float32, ids [bs, L-1, K] int64)."""
        bs = hidden_states.shape[0] // self.block_size
        hs = hidden_states.view(bs, self.block_size, -1)[:, 1:, :].reshape(-1, hidden_states.shape[-1])
        val, ids, lse = topk_logprobs_local(hs, self.weight, self.topk, self.org_vocab_start, self.select)
        if self.tp_size == 1:
            log_probs = val - lse.unsqueeze(1)
        else:
            log_probs, ids = merge_vocab_shards(
                self._all_gather(val), self._all_gather(ids), self._all_gather(lse), self.topk
            )
        k = self.topk
        return log_probs.view(bs, self.block_size - 1, k), ids.view(bs, self.block_size - 1, k)

    def _all_gather(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty((self.tp_size * x.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)
        self.tp_group.all_gather_into_tensor(out, x.contiguous())
        return out.view(self.tp_size, *x.shape)

    def __call__(self, hidden_states: torch.Tensor, input_ids: Optional[torch.Tensor] = None) -> None:
        log_probs, ids = self.compute(hidden_states)
        n = log_probs.shape[0] * log_probs.shape[1]
        self.out_log_probs[:n].copy_(log_probs.view(n, -1))
        self.out_ids[:n].copy_(ids.view(n, -1))

    def read(self, bs: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """The outputs of the last replay for ``bs`` requests: ([bs, L-1, K], [bs, L-1, K])."""
        n = bs * (self.block_size - 1)
        shape = (bs, self.block_size - 1, self.topk)
        return self.out_log_probs[:n].view(shape), self.out_ids[:n].view(shape)


def build_draft_head(target_model, *, block_size, topk, max_bs, tp_group) -> Tuple[Optional[DraftTopKHead], str]:
    """A head over the target's LM head, or (None, reason) when it cannot be built."""
    lm_head = getattr(target_model, "lm_head", None)
    if lm_head is None or not hasattr(lm_head, "weight"):
        return None, "the target model exposes no lm_head.weight"
    if not torch.is_floating_point(lm_head.weight):
        return None, "quantized lm_head"
    tp_size = int(tp_group.world_size) if tp_group is not None else 1
    shard = getattr(lm_head, "shard_indices", None)
    if shard is None:
        if tp_size != 1:
            return None, "tp > 1 without vocab shard metadata"
        num_org, start = int(lm_head.weight.shape[0]), 0
    else:
        if int(shard.num_added_elements) != 0:
            return None, "added vocabulary"
        num_org, start = int(shard.num_org_elements), int(shard.org_vocab_start_index)
    head = DraftTopKHead(
        weight=lm_head.weight, block_size=block_size, topk=topk, num_org=num_org,
        org_vocab_start=start, max_bs=max_bs, tp_group=tp_group if tp_size > 1 else None,
    )
    return head, ""
