"""DDTREE's flashinfer plan without host syncs, for the CUDA-graph replays of its target verify and draft block.

Why: at the Qwen3-8B shape on the H200 (session 17, budget 15, ``benchmark/results/session17/``) a DDTREE round
on flashinfer spent 1.73 ms of its 8.16 ms outside the CUDA graphs at concurrency 1 (fa3 0.39 ms, triton
0.59 ms). Before each graph replay upstream plans with FlashInfer's ``BatchPrefillWithPagedKVCacheWrapper.plan``,
which copies qo_indptr, kv_indptr and last_page_len to the host (and ``segment_packbits`` reads the packed tree
mask's length) before it schedules: per round 6 device-to-host copies and 8 stream syncs (``_draft`` and
``_verify``), each leaving the GPU idle while the CPU plans (4.4 ms of GPU idle per profiled round, 0.4-0.6 ms
on triton / fa3, which have no sync in the round).

What this does instead, for those replays only (``call_begin_forward``, an AROUND hook of
``FlashInferIndicesUpdaterPrefill.call_begin_forward``):
- the schedule (FlashInfer's own ``_cached_module.plan``, as ``plan()`` calls it) is made from host numbers the
  round already has: N query rows per request and an UPPER BOUND of each request's key count, the forward's
  ``seq_lens_cpu`` (the worker's host lengths: committed lengths that may lag the device's by one round's commit,
  at most W, plus the forward's own rows; ``worker._HostLens``) plus max(N, W), which also covers the graph's pad
  rows (fill value + N on the device);
- the device buffers the captured kernels read (qo / kv indptr, kv indices, last-page lengths) are refreshed on
  the stream, and the tree mask is packed on the device (``pack_tree_mask`` on ``kernels/pack_mask.py``: one
  launch, FlashInfer's little-endian ``segment_packbits`` layout) at byte offsets computed there from the exact
  device lengths.
Why an upper bound gives the same attention: the kernel takes each request's key count from the device index
buffers and clamps every key chunk to it (``chunk_start = min(tile * chunk, kv_len)`` in FlashInfer's
``BatchPrefillWithPagedKVCacheKernel``), so a schedule made for longer sequences covers the same keys, with some
chunks empty, PROVIDED the work list and the merge agree with the kernel on how many chunks each request has. They
do not by themselves: in CUDA-graph mode split-KV is always on, the kernel places query row r's partial output of
chunk j at ``o_indptr[b] + r * chunks(b) + j`` with ``chunks(b)`` from the TRUE key count, and the plan's work list,
``o_indptr`` and ``merge_indptr`` count chunks of the BOUND. Where a bound spans one chunk more than the true count
(e.g. 142 keys bound, 116 true, chunks of 128) the merge reads other rows' slots. Session 22 found this on the H200:
the everyday-features test on the trained pair diverged everywhere with the plan on and the chunked-prefill engine
died on a device-side assert (``benchmark/results/gpu_tests_h200_session22.json``), while its earlier checks had
kept the chunk counts equal and the sharp parity fixtures' margins hide attention errors. So after the schedule one
launch rewrites those arrays in the device workspace from the device key counts, keeping the plan's chunk size
(``rewrite_split_layout``, ``kernels/split_layout.py``): exactly what FlashInfer's plan writes for the true counts.
The GPU test ``test/worker/test_flashinfer_plan_gpu.py`` checks the attention against upstream's plan on the same
inputs (lengths below the bound, a bound one chunk past the true count, pad rows) and end to end (greedy parity).

The schedule reaches the device as FlashInfer's own ``plan()`` sends it: written to a pinned host buffer and
copied with ``cudaMemcpyAsync`` on the stream (``PrefillPlan`` in FlashInfer's ``scheduler.cuh``), which reads
the host buffer when the copy runs. Upstream's plan() drains the stream first (its device-to-host copies); this
one does not, so with the overlap scheduler round k + 1 is planned while round k's copies may still wait in the
stream, and a later plan must not overwrite a host buffer whose copy has not run: the requests of a padded batch
can change between rounds, so round k must not read round k + 1's schedule. Each plan therefore writes the next
buffer of a ring (``_PinnedRing``, ``RING_SIZE`` buffers per size): a buffer is written again only ``RING_SIZE``
plans later, at least two rounds later (a round plans twice: its draft block and its verify), and the scheduler
has waited for round k before it launches round k + 2 (overlap) or for every round (no overlap). DDTREE's future
map does not make the scheduler wait for round k before it launches round k + 1 (``algorithm``), so this ring is
what keeps the schedules apart. Session 18 measured this plan on the H200: its checks pass, but the round was
slower, not faster (``benchmark/results/session18/``, no plain flashinfer engine in that run). Session 20 paired
both in one run (``benchmark/results/session20/shape_fiplan.json``, 8B shape, dummy weights, 2 rotated
repetitions): medians 7.58 vs 8.00 ms a round at c 1 and 18.33 vs 19.15 ms at c 32, time outside the CUDA graphs
1.14 vs 1.57 ms and 2.30 vs 3.23 ms, no host sync left in the round; the c 1 repetitions overlap (7.30 / 7.85 vs
8.29 / 7.71). Session 21, after DDTREE's future map stopped making the scheduler wait for round k before it launches
round k + 1 (``benchmark/results/session21/shape_fiplan.json``, 2 rotated repetitions): 7.17 / 7.04 vs 7.88 / 8.27
ms at c 1, 18.82 / 18.69 vs 19.94 / 20.21 ms at c 32, faster in every repetition; greedy parity exact (b15 / b64,
overlap on and off). Session 22: T > 0 passed (41), the everyday features FAILED (the chunk-count mismatch above,
fixed since); the same run's profiles put its round at 0.42 ms outside the CUDA graphs at c 1 and 0.92 ms at c 32
(``benchmark/results/session22/shape_normal/``). Session 23, with the rewrite (``benchmark/results/session23/``,
``gpu_tests_h200_session23.json``), on flashinfer with the plan on: its GPU tests, the everyday features (14), every
tree node's verify logits against the float32 reference (b15 k8, b64 k1, b64 k8), T > 0 (41) and the trained pair's
parity matrix (3) all passed; at the 8B shape (drafter N(0, 0.02), 2 paired rotated repetitions) its round spent
0.33 ms (5 %) outside the CUDA graphs at c 1 and 1.40 ms (7 %) at c 32 (upstream's plan: 1.54 ms at c 1 in session
21). So it is the default on the FlashInfer it was written against.

Anything else (eager forwards, ragged or sliding-window or cross-attention wrappers, page_size > 1, a custom
kv_start_idx, a mask bound past the wrapper's buffer, a FlashInfer this module was not written against) runs
upstream's ``call_begin_forward`` unchanged. Upstream's plan must have run once on the wrapper (the capture
does) so that ``_cached_module`` exists.

FlashInfer internals read (FlashInfer 0.6.14, SGLang 0.5.16's pin; ``TESTED_FLASHINFER``): the wrapper's
``is_cuda_graph_enabled``, ``_backend``, ``_cached_module.plan`` (its fa2 argument list), ``_float_workspace_buffer``,
``_int_workspace_buffer``, ``_pin_memory_int_workspace_buffer`` (its size and dtype, for the ring),
``_max_total_num_rows``, the plan info's layout (``PrefillPlanInfo::ToVector``: 15 fields, the split-KV arrays' offsets
in the int workspace), ``_qo_indptr_buf``, ``_paged_kv_indptr_buf``, ``_paged_kv_last_page_len_buf``,
``_paged_kv_indices_buf``, ``_custom_mask_buf``, ``_mask_indptr_buf``, and the fields ``plan()`` sets
(``_plan_info``, ``_batch_size``, ``_num_qo_heads``, ``_num_kv_heads``, ``_qo_indptr_last``, ``_max_q_len``,
``_max_kv_len``).

Switch: ``SGLANG_DDTREE_FLASHINFER_PLAN`` = 1 (this plan) | 0 (upstream's plan()) | unset: this plan where the
installed FlashInfer is one it was written against (``TESTED_FLASHINFER``, session 23's checks above), upstream's
plan() elsewhere (SGLang 0.5.17+ pin other FlashInfer releases, and 0.5.19 / 0.5.22+ pass keyword arguments this
hook hands back to upstream); the start-up log says which. Set to 1 with another FlashInfer it is refused at argument
validation. Where the host time goes is what ``benchmark/bench_flashinfer_plan.py`` times.
"""

from __future__ import annotations

import logging
from typing import NamedTuple, Optional, Tuple

import torch

from sglang_ddtree.config import DDTreeConfig, env_switch, is_validated_ddtree_args
from sglang_ddtree.tree._common import cdiv, next_pow2, use_triton

logger = logging.getLogger(__name__)

ENV = "SGLANG_DDTREE_FLASHINFER_PLAN"
TESTED_FLASHINFER = ("0.6.14",)
_BYTES_PER_PROGRAM = 256
_SERVES = "_ddtree_sync_free_plan"  # attribute of an updater: whether this process serves DDTREE (first call)
_LAG = "_ddtree_host_lag"  # attribute of an updater: W, the most a host length lags the device's
_warned = set()  # what _warn_once has said (once per process each)
RING_SIZE = 6  # pinned schedule buffers per size: >= 2 rounds of 2 plans in flight, with margin (module docstring)


class _PinnedRing:
    """Host buffers for FlashInfer's schedule, handed out in turn: ``take(like)`` -> a buffer of ``like``'s size and
    dtype (pinned where ``like`` is) that none of the last ``RING_SIZE - 1`` plans of that size was given. Buffers
    are never freed while the process plans: a copy FlashInfer queued from one may still be pending."""

    def __init__(self, size: int = RING_SIZE):
        self.size = size
        self._rings = {}  # (numel, dtype, pinned) -> [buffers, next index]

    def take(self, like: torch.Tensor) -> torch.Tensor:
        key = (like.numel(), like.dtype, like.is_pinned())
        ring = self._rings.get(key)
        if ring is None:
            ring = self._rings[key] = [[torch.empty(like.shape, dtype=like.dtype, pin_memory=key[2])
                                        for _ in range(self.size)], 0]
        bufs, i = ring
        ring[1] = (i + 1) % self.size
        return bufs[i]


_ring = _PinnedRing()


def _switch(default: bool) -> bool:
    return env_switch(ENV, on="DDTREE's host-sync-free flashinfer plan", off="upstream's plan()", default=default)


def enabled() -> bool:
    """The switch (module docstring): 1 / 0 as set, unset -> on where the installed FlashInfer is a tested one; a
    value other than 0 / 1 is an error naming the variable."""
    return _switch(flashinfer_tested())


def explicitly_enabled() -> bool:
    """The switch set to 1 by the user: validation refuses that with a FlashInfer this plan was not written
    against (``flashinfer_tested``); unset, such a FlashInfer plans with upstream's plan()."""
    return _switch(False)


def describe() -> str:
    """One line for the start-up log of a DDTREE server on flashinfer: which plan its graph replays use, and why."""
    installed = installed_flashinfer() or "none"
    if enabled():
        return (f"DDTREE on flashinfer: graph replays planned without host syncs (DDTREE's plan, flashinfer-python "
                f"{installed}; {ENV}=0 for upstream's plan()).")
    why = (f"{ENV}=0" if not _switch(True)  # set to 0 (unset reads as on here)
           else f"flashinfer-python {installed}: the sync-free plan is written against {' or '.join(TESTED_FLASHINFER)}")
    return f"DDTREE on flashinfer: graph replays planned by upstream's plan() ({why})."


def installed_flashinfer() -> Optional[str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("flashinfer-python")
    except PackageNotFoundError:
        return None


def flashinfer_tested() -> bool:
    return installed_flashinfer() in TESTED_FLASHINFER


# ---- host layout ----------------------------------------------------------------------------------------
def host_layout(seq_lens_cpu: torch.Tensor, rows_per_req: int,
                lag: int = 0) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, int]:
    """Host schedule inputs of one replay: (qo_indptr [bs+1], kv_indptr [bs+1], kv_lens [bs] int32 CPU,
    packed-mask bytes bound, largest per-request packed bytes bound), page_size 1.

    ``seq_lens_cpu`` [bs]: the forward's host lengths. A real request's is the worker's host committed length
    plus the forward's rows, and the committed length may lag the device's by up to ``lag`` (one round's commit,
    W); a graph pad row's is the fill value, whose device key count is fill + ``rows_per_req``. Each key count
    is bounded by seq_lens_cpu + max(rows_per_req, lag)."""
    if seq_lens_cpu.dim() != 1 or seq_lens_cpu.device.type != "cpu":
        raise ValueError(f"seq_lens_cpu must be a 1-D CPU tensor, got {tuple(seq_lens_cpu.shape)} on "
                         f"{seq_lens_cpu.device}")
    n = int(rows_per_req)
    if n <= 0:
        raise ValueError(f"rows_per_req must be > 0, got {rows_per_req}")
    bs = seq_lens_cpu.numel()
    kv_lens = (seq_lens_cpu.to(torch.int64) + max(n, int(lag))).clamp(min=1)
    qo_indptr = torch.arange(0, (bs + 1) * n, n, dtype=torch.int32)
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(kv_lens, 0).to(torch.int32)
    packed = (kv_lens * n + 7) // 8
    return qo_indptr, kv_indptr, kv_lens.to(torch.int32), int(packed.sum()), int(packed.max()) if bs else 0


# ---- the tree mask, packed on the device ------------------------------------------------------------------
def pack_tree_mask_torch(mask: torch.Tensor, qo_indptr: torch.Tensor, kv_indptr: torch.Tensor,
                         out: torch.Tensor, out_indptr: torch.Tensor) -> None:
    """Reference of :func:`pack_tree_mask` (same arguments, same bytes written)."""
    bs = qo_indptr.numel() - 1
    seg = ((qo_indptr[1:] - qo_indptr[:-1]).to(torch.int64) * (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int64))
    nbytes = (seg + 7) // 8
    bit0 = torch.cumsum(seg, 0) - seg
    byte0 = torch.cumsum(nbytes, 0) - nbytes
    out_indptr[0] = 0
    out_indptr[1:bs + 1] = torch.cumsum(nbytes, 0).to(out_indptr.dtype)
    flat = mask.reshape(-1)
    weights = (1 << torch.arange(8, device=mask.device)).to(torch.int32)
    for b in range(bs):
        s, length, o, nb = int(bit0[b]), int(seg[b]), int(byte0[b]), int(nbytes[b])
        bits = torch.zeros(nb * 8, dtype=torch.int32, device=mask.device)
        bits[:length] = (flat[s:s + length] != 0).to(torch.int32)
        out[o:o + nb] = (bits.view(nb, 8) * weights).sum(1).to(torch.uint8)


def pack_tree_mask(mask: torch.Tensor, qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, out: torch.Tensor,
                   out_indptr: torch.Tensor, max_bytes_per_req: int, *, backend: str = "auto") -> None:
    """Pack each request's [q_len x kv_len] block of the flat bool ``mask`` (requests back to back, row-major)
    into bytes, little-endian within a byte (FlashInfer's ``segment_packbits(..., bitorder="little")``), into
    ``out`` uint8 at offsets ``out_indptr`` [bs+1] int32, which this writes too. Lengths come from the device
    indptrs (no host read); ``max_bytes_per_req`` is a host upper bound of any request's packed bytes (sizes
    the grid); the caller checks that ``out`` holds the total. One launch."""
    bs = qo_indptr.numel() - 1
    if bs <= 0:
        return
    if not use_triton("pack_tree_mask", mask.device, backend):
        pack_tree_mask_torch(mask, qo_indptr, kv_indptr, out, out_indptr)
        return
    from sglang_ddtree.worker.kernels.pack_mask import pack_tree_mask_kernel

    grid = (bs, max(1, cdiv(int(max_bytes_per_req), _BYTES_PER_PROGRAM)))
    flat = mask.reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    pack_tree_mask_kernel[grid](flat, qo_indptr, kv_indptr, out, out_indptr, bs, B_POW2=next_pow2(bs + 1),
                  BLOCK=_BYTES_PER_PROGRAM, num_warps=4)


# ---- the split-KV work list, from the device key counts ------------------------------------------------------
PLAN_INFO_FIELDS = 15  # FlashInfer 0.6.14's PrefillPlanInfo::ToVector()
(_PADDED, _TOTAL_ROWS, _CTA_TILE_Q, _REQUEST, _QO_TILE, _KV_TILE, _MERGE, _O_INDPTR, _CHUNK, _VALID, _GRAPH,
 _SPLIT) = 0, 1, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14
_LAYOUT = "_ddtree_split_layout"  # attribute of a wrapper: (plan info, bs, rows, group) -> its SplitLayout


class SplitLayout(NamedTuple):
    """Views into a CUDA-graph wrapper's device int workspace where its plan put the split-KV schedule (offsets
    from the plan info; fixed for a wrapper in CUDA-graph mode), with the numbers the rewrite needs."""

    request: torch.Tensor  # [padded] int32
    qo_tile: torch.Tensor  # [padded] int32
    kv_tile: torch.Tensor  # [padded] int32
    valid: torch.Tensor  # [padded] uint8 (FlashInfer's bool block_valid_mask)
    o_indptr: torch.Tensor  # [bs + 1] int32
    merge_indptr: torch.Tensor  # [bs * rows + 1] int32
    chunk: torch.Tensor  # [1] int32: the plan's kv_chunk_size
    rows: int  # query rows per request
    q_tiles: int  # query tiles per request


def split_layout(wrapper, plan_info, bs: int, rows: int, group: int) -> Optional[SplitLayout]:
    """The split-KV schedule's place in ``wrapper._int_workspace_buffer`` after ``schedule``; None where the plan
    info is not a CUDA-graph split-KV prefill plan of the layout this module reads (the caller runs upstream's
    plan instead). Cached on the wrapper."""
    try:
        fields = tuple(int(x) for x in plan_info)
    except TypeError:
        return None
    key = (fields, bs, rows, group)
    cached = getattr(wrapper, _LAYOUT, None)
    if cached is not None and cached[0] == key:
        return cached[1]
    if len(fields) != PLAN_INFO_FIELDS or not fields[_GRAPH] or not fields[_SPLIT] or fields[_CTA_TILE_Q] <= 0:
        return None
    ws, padded = wrapper._int_workspace_buffer, fields[_PADDED]
    if bs * rows > fields[_TOTAL_ROWS]:
        return None

    def view(field, count, dtype=torch.int32):
        start = fields[field]
        return ws[start:start + count * dtype.itemsize].view(dtype)

    try:  # an offset not aligned to its dtype cannot be viewed (FlashInfer aligns them; a layout change would not)
        layout = SplitLayout(view(_REQUEST, padded), view(_QO_TILE, padded), view(_KV_TILE, padded),
                             view(_VALID, padded, torch.uint8), view(_O_INDPTR, bs + 1), view(_MERGE, bs * rows + 1),
                             view(_CHUNK, 1), rows, cdiv(rows * group, fields[_CTA_TILE_Q]))
    except RuntimeError:
        return None
    if any(t.numel() != n for t, n in ((layout.request, padded), (layout.merge_indptr, bs * rows + 1),
                                       (layout.valid, padded), (layout.chunk, 1))):
        return None  # an offset past the workspace's end
    setattr(wrapper, _LAYOUT, (key, layout))
    return layout


def rewrite_split_layout_torch(kv_indptr: torch.Tensor, lay: SplitLayout) -> None:
    """Reference of :func:`rewrite_split_layout` (same arguments, same entries written; reads back to the host)."""
    bs, rows, chunk = kv_indptr.numel() - 1, lay.rows, int(lay.chunk[0])
    kv = (kv_indptr[1:] - kv_indptr[:-1]).clamp(min=1).tolist()
    work = o = 0
    lay.merge_indptr[0] = 0
    for b in range(bs):
        chunks = cdiv(int(kv[b]), chunk)
        n_work = chunks * lay.q_tiles
        w = torch.arange(n_work, dtype=torch.int32, device=lay.request.device)
        lay.request[work:work + n_work] = b
        lay.qo_tile[work:work + n_work] = w // chunks
        lay.kv_tile[work:work + n_work] = w % chunks
        lay.valid[work:work + n_work] = 1
        lay.o_indptr[b] = o
        r = torch.arange(1, rows + 1, dtype=torch.int32, device=lay.request.device)
        lay.merge_indptr[b * rows + 1:(b + 1) * rows + 1] = o + r * chunks
        work, o = work + n_work, o + rows * chunks
    lay.o_indptr[bs] = o
    lay.valid[work:] = 0


def rewrite_split_layout(kv_indptr: torch.Tensor, lay: SplitLayout, *, backend: str = "auto") -> None:
    """Rewrite the split-KV work list, ``o_indptr``, ``merge_indptr`` and ``block_valid_mask`` as FlashInfer's plan
    writes them for the key counts of the device's ``kv_indptr`` [bs + 1] int32 (page size 1), keeping the plan's
    chunk size (``kernels/split_layout.py`` says why). One launch, after the plan's copy on the same stream."""
    bs = kv_indptr.numel() - 1
    if bs <= 0:
        return
    if not use_triton("rewrite_split_layout", kv_indptr.device, backend):
        rewrite_split_layout_torch(kv_indptr, lay)
        return
    from sglang_ddtree.worker.kernels.split_layout import split_kv_layout_kernel

    split_kv_layout_kernel[(bs,)](kv_indptr, lay.chunk, lay.request, lay.qo_tile, lay.kv_tile, lay.valid,
                                  lay.o_indptr, lay.merge_indptr, bs, lay.rows, lay.q_tiles, lay.request.numel(),
                                  B_POW2=next_pow2(bs + 1), BLOCK=_LAYOUT_BLOCK, num_warps=4)


_LAYOUT_BLOCK = 256


# ---- the plan ---------------------------------------------------------------------------------------------
def _warn_once(kind: str, msg: str, *args) -> None:
    """Log ``msg`` the first time a replay falls back to upstream's plan() for reason ``kind``."""
    if kind not in _warned:
        _warned.add(kind)
        logger.warning(msg, *args)


def serves_ddtree(updater) -> bool:
    """Whether this process serves DDTREE and the switch is on (decided on the updater's first call)."""
    cached = getattr(updater, _SERVES, None)
    if cached is None:
        from sglang.srt.runtime_context import get_server_args

        server_args = get_server_args() if enabled() and flashinfer_tested() else None
        cached = server_args is not None and is_validated_ddtree_args(server_args)
        if cached:  # the worker's host lengths lag the device's by at most one round's commit
            setattr(updater, _LAG, DDTreeConfig.from_server_args(server_args).accept_width)
        setattr(updater, _SERVES, cached)
    return cached


def _eligible(updater, wrapper, use_ragged, spec_info, kv_start_idx, seq_lens, args, kwargs) -> bool:
    """A graph replay this plan handles: upstream's plan() has run on the wrapper (capture), single wrapper,
    page_size 1, no ragged / kv_start_idx / extra argument, host lengths of this batch."""
    backend, seq_lens_cpu = updater.attn_backend, kwargs.get("seq_lens_cpu")
    return (spec_info is not None and not use_ragged and kv_start_idx is None and seq_lens_cpu is not None
            and seq_lens_cpu.numel() == seq_lens.numel() and not args
            and all(k == "seq_lens_cpu" or _neutral(k, v) for k, v in kwargs.items())
            and getattr(wrapper, "is_cuda_graph_enabled", False) and getattr(wrapper, "_backend", None) == "fa2"
            and getattr(wrapper, "_cached_module", None) is not None
            and getattr(wrapper, "_max_total_num_rows", None) is not None
            and getattr(backend, "dispatch_reason", None) is None and int(getattr(backend, "page_size", 1)) == 1)


# call_begin_forward's keyword arguments this plan handles, with the only values it accepts
_NEUTRAL_KWARGS = {"use_sliding_window_kv_pool": False, "fixed_split_size": None, "multi_item_params": None,
                   "cross_attention_custom_mask": None, "custom_kv_indices": None, "window_left": -1}


def _neutral(key: str, value) -> bool:
    if key not in _NEUTRAL_KWARGS:
        return False
    default = _NEUTRAL_KWARGS[key]
    return value is None if default is None else (not torch.is_tensor(value) and value == default)


def call_begin_forward(original, updater, wrapper_ragged, wrapper_paged, req_pool_indices, paged_kernel_lens,
                       paged_kernel_lens_sum, seq_lens, prefix_lens, kv_start_idx, kv_indptr, qo_indptr, use_ragged,
                       spec_info, *args, **kwargs):
    """AROUND hook (module docstring): DDTREE's graph replays plan here; everything else runs ``original``."""
    if not (serves_ddtree(updater)
            and _eligible(updater, wrapper_paged, use_ragged, spec_info, kv_start_idx, seq_lens, args, kwargs)
            and plan(updater, wrapper_paged, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, spec_info,
                     kwargs["seq_lens_cpu"])):
        return original(updater, wrapper_ragged, wrapper_paged, req_pool_indices, paged_kernel_lens,
                        paged_kernel_lens_sum, seq_lens, prefix_lens, kv_start_idx, kv_indptr, qo_indptr, use_ragged,
                        spec_info, *args, **kwargs)
    return None


def plan(updater, wrapper, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, spec_info,
         seq_lens_cpu) -> bool:
    """The replay's plan without a host read (module docstring); False (nothing changed) where a bound does not
    fit the wrapper's buffers, so the caller runs upstream's plan."""
    n = int(spec_info.draft_token_num)
    qo_host, kv_host, kv_lens_host, packed_bound, max_bytes = host_layout(seq_lens_cpu, n, getattr(updater, _LAG, 0))
    kv_indices, kv_indptr_d, qo_indptr_d, custom_mask = spec_info.generate_attn_arg_prefill(
        req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, updater.req_to_token)
    bs = seq_lens_cpu.numel()
    total_rows = bs * n
    if (kv_indices.numel() > wrapper._paged_kv_indices_buf.numel() or total_rows > wrapper._max_total_num_rows
            or (custom_mask is not None and (not torch.is_tensor(wrapper._custom_mask_buf)
                                             or packed_bound > wrapper._custom_mask_buf.numel()))):
        _warn_once("over buffers", "DDTREE: a flashinfer replay's bounds exceed its wrapper's buffers (rows %d, mask "
                   "bytes <= %d): upstream's plan() for such replays.", total_rows, packed_bound)
        return False
    wrapper._qo_indptr_buf.copy_(qo_indptr_d, non_blocking=True)
    wrapper._paged_kv_indptr_buf.copy_(kv_indptr_d, non_blocking=True)
    wrapper._paged_kv_last_page_len_buf.copy_(updater.kv_last_page_len[:bs], non_blocking=True)
    wrapper._paged_kv_indices_buf[: kv_indices.numel()].copy_(kv_indices, non_blocking=True)
    if custom_mask is not None:
        pack_tree_mask(custom_mask, qo_indptr_d, kv_indptr_d, wrapper._custom_mask_buf, wrapper._mask_indptr_buf,
                       max_bytes)
    wrapper._batch_size = bs
    wrapper._num_qo_heads = updater.num_qo_heads
    wrapper._num_kv_heads = updater.num_kv_heads
    wrapper._qo_indptr_last = total_rows
    wrapper._max_q_len = n
    wrapper._max_kv_len = int(kv_lens_host.max())
    plan_info = schedule(wrapper, qo_host, kv_host, kv_lens_host, bs, updater.num_qo_heads, updater.num_kv_heads,
                         updater.head_dim)
    layout = split_layout(wrapper, plan_info, bs, n, updater.num_qo_heads // updater.num_kv_heads)
    if layout is None:  # upstream's plan() redoes everything above (its copies queue after ours)
        _warn_once("plan info", "DDTREE: flashinfer's plan info %r is not a CUDA-graph split-KV prefill plan this "
                   "module reads: upstream's plan() for such replays.", plan_info)
        return False
    rewrite_split_layout(kv_indptr_d, layout)
    wrapper._plan_info = plan_info
    return True



def schedule(wrapper, qo_host, kv_host, kv_lens_host, bs: int, num_qo_heads: int, num_kv_heads: int,
             head_dim: int):
    """FlashInfer's fa2 schedule of a CUDA-graph wrapper from host indptrs / key counts (page_size 1, causal off,
    no window), as its ``plan()`` makes it: ``_cached_module.plan``'s plan info. The schedule is staged in the
    next pinned buffer of the ring, not the wrapper's own (module docstring)."""
    return wrapper._cached_module.plan(
        wrapper._float_workspace_buffer, wrapper._int_workspace_buffer,
        _ring.take(wrapper._pin_memory_int_workspace_buffer), qo_host, kv_host, kv_lens_host,
        wrapper._max_total_num_rows, bs, num_qo_heads, num_kv_heads, 1, True,
        head_dim, head_dim, False, -1,
        -1, False, 0,  # fa2: fixed_split_size, disable_split_kv, num_colocated_ctas
    )

