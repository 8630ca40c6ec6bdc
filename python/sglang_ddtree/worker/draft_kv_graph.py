"""The drafter's new context as one CUDA-graph replay per round (COMMIT step of the round).

After acceptance the accepted path's target hidden states become the drafter's context: upstream DFLASH's
``_append_target_hidden_to_draft_kv_by_loc`` projects them (``fc`` + ``hidden_norm``), computes every draft
layer's K / V (one batched GEMM + a norm/RoPE kernel) and writes the live prefix of each request's row into the
draft KV pool (one kernel per layer), behind ~80 lines of per-call argument checks: about nine eager launches
and a millisecond of host time a round. All its shapes are fixed per batch size (bs x W rows, W = accept width),
so this module captures that same upstream call once per captured batch size into a CUDA graph that reads
static buffers; a round copies its inputs in (one gather + three small copies) and replays. The replayed work
is the upstream call itself, so the values written are the same. Batch sizes without a graph pad to the next
captured one (padded rows commit nothing: their commit length is 0); above the largest, the eager call.
No host sync at replay.

Upstream's fused path writes through a workspace it owns and regrows (doubling) whenever a larger append arrives,
as every prefill does with the whole prompt, dropping the old tensors; a graph captured over them would then read
and write freed memory, i.e. another tensor's (seen on the H200: an illegal memory access a few requests after a
384-token prefix, fa3 and the fused tree path alike, none with the eager call). So the graphs keep every tensor
that the call's owners (upstream's fused-KV helper, the drafter's buffers such as its RoPE cache) held at capture
alive for their own lifetime; a later regrow gives the eager calls new memory and leaves the graphs theirs.

On by default since that fix passed the engine-level checks on the H200 (session 12: everyday features on fa3 and
triton, T > 0 on fa3, sharp greedy parity on triton and fa3 with and without overlap, all with the graphs on;
``benchmark/results/gpu_tests_h200_session12.json``). ``SGLANG_DDTREE_DRAFT_KV_GRAPH=0`` keeps upstream's eager
call (bench config ``+kveager``; ``+kvgraph`` forces the graphs).
"""

from __future__ import annotations

import bisect
import logging
import time
from typing import Callable, Dict, List, Optional, Sequence

import torch

from sglang_ddtree.config import env_switch

logger = logging.getLogger(__name__)

ENV = "SGLANG_DDTREE_DRAFT_KV_GRAPH"


def enabled() -> bool:
    """Whether the draft-KV append replays captured graphs (default on; ``ENV=0``: upstream's eager call)."""
    return env_switch(ENV, on="the draft-KV append replayed from CUDA graphs", off="upstream's eager call",
                      default=True)


def held_tensors(owners: Sequence[object]) -> List[torch.Tensor]:
    """Every tensor ``owners`` hold now: a module's buffers, an object's tensor attributes and the buffers of its
    module attributes (upstream's fused-KV helper keeps its workspace and its RoPE module that way)."""
    found: List[torch.Tensor] = []
    for owner in owners:
        if owner is None:
            continue
        if isinstance(owner, torch.nn.Module):
            found.extend(owner.buffers())
            continue
        for value in vars(owner).values():
            if isinstance(value, torch.Tensor):
                found.append(value)
            elif isinstance(value, torch.nn.Module):
                found.extend(value.buffers())
    return found


class DraftKVAppendGraphs:
    """Per-batch-size CUDA graphs of ``append(target_hidden, cache_loc, positions, cache_loc_2d, commit_lens)``.

    ``append`` is the worker's bound ``_append_target_hidden_to_draft_kv_by_loc`` (upstream DFLASH's). Static
    inputs, sized for the largest captured batch size B and W columns (rows past a round's batch size keep an
    earlier round's values, or the zeros they start with; only their commit length matters):
        hidden    # [B*W, H'] target dtype: the accepted rows' target hidden states (gathered in)
        loc_2d    # [B, W] int64: draft KV slots
        positions # [B*W] int64: positions of the accepted path
        lens      # [B] int32: commit lengths (1..W); 0 in a replay's padded rows, so they write nothing
    """

    def __init__(self, append: Callable[..., None], *, batch_sizes: Sequence[int], width: int, hidden_dim: int,
                 dtype: torch.dtype, device, owners: Sequence[object] = (), is_rank0: bool = True):
        self.append = append
        self.width = int(width)
        self.batch_sizes = sorted({int(b) for b in batch_sizes if int(b) > 0})
        max_bs = self.batch_sizes[-1]
        rows = max_bs * self.width
        self.hidden = torch.zeros((rows, int(hidden_dim)), dtype=dtype, device=device)
        self.loc_2d = torch.zeros((max_bs, self.width), dtype=torch.int64, device=device)
        self.positions = torch.zeros((rows,), dtype=torch.int64, device=device)
        self.lens = torch.zeros((max_bs,), dtype=torch.int32, device=device)
        self.graphs: Dict[int, torch.cuda.CUDAGraph] = {}
        self._capture(is_rank0)
        # What the graphs read and write besides the static inputs, kept alive past upstream's regrows (module doc).
        self.kept = held_tensors(owners)

    def _call(self, bs: int) -> None:
        rows = bs * self.width
        loc_2d = self.loc_2d[:bs]
        self.append(target_hidden=self.hidden[:rows], cache_loc=loc_2d.view(-1), positions=self.positions[:rows],
                    cache_loc_2d=loc_2d, commit_lens=self.lens[:bs])

    def _capture(self, is_rank0: bool) -> None:
        tic = time.perf_counter()
        free0 = torch.cuda.mem_get_info()[0]
        # Eager warm-up at the largest size first: upstream sizes its fused-KV workspace on first use (a later
        # growth would free memory a captured graph still reads) and picks its fused or per-layer path there.
        # The inputs are zeros with commit length 0: nothing is written to the pool.
        self._call(self.batch_sizes[-1])
        torch.cuda.synchronize()
        pool = torch.cuda.graph_pool_handle()
        for bs in reversed(self.batch_sizes):  # largest first, so smaller graphs reuse its pool blocks
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self._call(bs)
            self.graphs[bs] = graph
        torch.cuda.synchronize()
        if is_rank0:
            logger.info("DDTREE draft-KV append: %d CUDA graphs (batch sizes %s..%s, %d rows each) captured in "
                        "%.2f s, %.3f GB.", len(self.graphs), self.batch_sizes[0], self.batch_sizes[-1], self.width,
                        time.perf_counter() - tic, (free0 - torch.cuda.mem_get_info()[0]) / 2**30)

    def graph_bs(self, bs: int) -> Optional[int]:
        """The captured batch size a round of ``bs`` requests replays (the smallest >= bs), or None (eager)."""
        i = bisect.bisect_left(self.batch_sizes, bs)
        return self.batch_sizes[i] if i < len(self.batch_sizes) else None

    def __call__(self, hidden: torch.Tensor, ctx_rows: torch.Tensor, ctx_loc_2d: torch.Tensor,
                 ctx_positions: torch.Tensor, commit_lens: torch.Tensor) -> None:
        """Append one round's context. Shape: hidden [bs*N, H'] (the verify's target hidden states), ctx_rows
        [bs*W] int64 (rows of ``hidden``), ctx_loc_2d [bs, W] int64, ctx_positions [bs*W] int64, commit_lens
        [bs] int (1..W) (``kv_commit.RoundCommit``). Above the largest graph, or hidden states of another dtype
        than the graphs were captured for, the eager call. No host sync."""
        bs = int(ctx_loc_2d.shape[0])
        graph_bs = self.graph_bs(bs)
        if graph_bs is None or hidden.dtype != self.hidden.dtype:
            self.append(target_hidden=hidden[ctx_rows], cache_loc=ctx_loc_2d.view(-1), positions=ctx_positions,
                        cache_loc_2d=ctx_loc_2d, commit_lens=commit_lens)
            return
        rows = bs * self.width
        torch.index_select(hidden, 0, ctx_rows, out=self.hidden[:rows])
        self.loc_2d[:bs].copy_(ctx_loc_2d)
        self.positions[:rows].copy_(ctx_positions)
        self._replay(bs, graph_bs, commit_lens)

    def _replay(self, bs: int, graph_bs: int, commit_lens: Optional[torch.Tensor]) -> None:
        """The commit lengths into the static buffer (None: 1 each; padded rows commit nothing), then the graph of
        ``graph_bs``."""
        if commit_lens is None:
            self.lens[:bs].fill_(1)
        else:
            self.lens[:bs].copy_(commit_lens)
        if graph_bs != bs:
            self.lens[bs:graph_bs].zero_()
        self.graphs[graph_bs].replay()

    def append_root(self, hidden: torch.Tensor, loc: torch.Tensor, positions: torch.Tensor,
                    commit_lens: Optional[torch.Tensor]) -> None:
        """Append a width-0 round's context: each request's root row alone (``kv_commit.root_commit``), into column
        0 of the same graphs; the other columns keep earlier values and are never written (commit length 1).
        What ``__call__`` writes for that round's ``RoundCommit``, without gathering rows. Shape: hidden [bs, H']
        (the verify's one row per request), loc [bs] int64 (its slot), positions [bs] int64, commit_lens [bs]
        int32 (all 1). Above the largest graph, or hidden states of another dtype, the eager call. No host sync.

        ``commit_lens=None``: a prefill whose every request extends by one token (``worker.prefill``): the same
        replay with every commit length 1, and where it falls back, upstream's prefill call itself (no 2-D slots)."""
        bs = int(loc.shape[0])
        graph_bs = self.graph_bs(bs)
        if graph_bs is None or hidden.dtype != self.hidden.dtype:
            if commit_lens is None:
                self.append(target_hidden=hidden, cache_loc=loc, positions=positions)
            else:
                self.append(target_hidden=hidden, cache_loc=loc, positions=positions, cache_loc_2d=loc.view(bs, 1),
                            commit_lens=commit_lens)
            return
        self.hidden.view(-1, self.width, self.hidden.shape[1])[:bs, 0].copy_(hidden)
        self.loc_2d[:bs, 0].copy_(loc)
        self.positions.view(-1, self.width)[:bs, 0].copy_(positions)
        self._replay(bs, graph_bs, commit_lens)
