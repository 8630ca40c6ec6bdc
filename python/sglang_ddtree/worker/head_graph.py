"""A drafting round's tree head as one CUDA-graph replay (BUILD step of the round, fa3 only; on by default since
session 41).

Between the draft and the verify a tree round runs, eagerly: the verify slots (upstream's
``assign_extend_cache_locs``), the tree build (``build_tree``) and the verify topology with fa3's ancestor bits
(``verify_topology``): three Triton launches and their allocations, ~250 us of host time a round on the tiny pair
(session 36's split: 60 + 110 + 77 us, plus the bits buffer's look-up), while the GPU has little to do on a
host-bound engine. All their shapes are fixed per (batch size, budget), so this module captures them once per
captured verify batch size and tree bucket, reading static inputs; a round copies its five inputs in (prefix
lengths, request slots, bonus tokens, the draft's top-K log-probs and ids) and replays. The replayed work is the
same three calls, so the values are the same.

The one input that is not fixed per shape is the FULL_MASK's size, a host bound of the prefix lengths' sum. The
graphs write it into one static buffer sized for ``mask_capacity`` prefix tokens (the KV pool's size: without
shared prefixes the running requests' prefixes sum to at most that); the topology kernel places each request's
rows from prefix sums it computes on the GPU, so the buffer's head holds the very bytes the eager call writes, and
readers index it by the device lengths (``session40/fa3_mask_reads.md``: on fa3 with the fused tree attention a
graph-replayed verify reads none of it, an eager one gathers from it). A round whose host bound exceeds the
capacity (requests sharing a long cached prefix) takes the eager path, as does every round the graphs do not cover.

Batch sizes between captured ones pad to the next captured size: the padded rows' prefix lengths and request slots
are 0 (row 0 of the request pool, which upstream's graph runner pads with too), so they write inside the buffers;
their outputs are never read. Every
head graph shares one memory pool (they never run concurrently; each keeps its outputs referenced), and the mask
and bit buffers are shared as the verify graphs share theirs: a round's readers are launched before the next
round's replay, on the same stream.

Switch: ``SGLANG_DDTREE_HEAD_GRAPH`` = 1 / unset (this path, where it applies: fa3 with DDTREE's fused tree
attention, CUDA graphs for the target's verify, tp 1, no hybrid target; elsewhere the eager head, said once at start)
| 0 (the eager head). On by default since session 41 (H100): sharp greedy parity on fa3 was exact with it (auto's
bucket cycle with the compile watch, b64, b15 without overlap, no graphs), T > 0 passed, the GPU test found the
replays equal to the eager calls, and in paired tiny-pair runs budget 63 ran 1.05-1.16x faster with it (auto
0.98-1.03x) for 0.02 GB and 0.1 s of capture (``benchmark/results/session41/notes.md``).
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import time
from typing import Callable, Dict, NamedTuple, Optional, Sequence, Tuple

import torch

from sglang_ddtree.config import chain_shaped, env_switch
from sglang_ddtree.tree import Tree, build_tree
from sglang_ddtree.tree.topology import build_verify_topology, full_mask_numel

logger = logging.getLogger(__name__)

ENV = "SGLANG_DDTREE_HEAD_GRAPH"


def enabled() -> bool:
    """Whether drafting tree rounds replay captured heads where they apply (``ENV`` = 1 or unset; 0 turns it off)."""
    return env_switch(ENV, on="the tree head replayed from CUDA graphs", off="the eager head", default=True)


def requested() -> bool:
    """Whether ``ENV=1`` asks for the heads explicitly (a config that cannot have them then warns, not informs)."""
    return enabled() and os.environ.get(ENV, "").strip() == "1"


class Head(NamedTuple):
    """One round's head outputs, ``bs`` rows (views of a captured head's static outputs)."""

    verify_loc: torch.Tensor  # [bs*N] int64: req_to_token[b, prefix .. prefix + N)
    tree: Tree  # [bs, N] rows
    mask: torch.Tensor  # FULL_MASK, the static buffer (its head written for these rows)
    positions: torch.Tensor  # [bs*N] int64
    retrieve_index: torch.Tensor  # [bs, N] int64
    retrieve_next_token: torch.Tensor  # [bs, N] int64
    retrieve_next_sibling: torch.Tensor  # [bs, N] int64
    tree_bits: torch.Tensor  # [bs*N, NW] int32, in the verify backend's static bit buffer


def _rows(tree: Tree, bs: int) -> Tree:
    return Tree(token_ids=tree.token_ids[:bs], parents=tree.parents[:bs], depths=tree.depths[:bs],
                scores=tree.scores[:bs], valid=tree.valid[:bs], num_nodes=tree.num_nodes[:bs],
                max_depth=tree.max_depth)


def tree_buckets(config) -> list:
    """The buckets of ``config`` a head covers: the tree-shaped ones (width 0 and the chain keep their constant
    structure, ``chain_inputs``; a causal verify has no tree)."""
    return [b for b in config.buckets if not chain_shaped(b) and not config.verifies_causally(b)]


def for_config(config, *, heads_class=None, **kw) -> "TreeHeads":
    """The heads of a server with ``config``: its tree buckets, inputs as wide as the draft's positions (L - 1, not
    ``max_depth``: a budget below L - 1 reaches fewer levels, but the build reads every position) and its top-K;
    ``kw`` the rest of ``TreeHeads``' arguments. ``heads_class``: a ``TreeHeads`` subclass (tests)."""
    return (heads_class or TreeHeads)(budgets=tree_buckets(config), depth=config.draft_positions, topk=config.topk,
                                      **kw)


class TreeHeads:
    """The captured heads of one server: per (captured batch size B, tree bucket budget b) the head over static
    inputs of B rows. ``slots`` is upstream's ``assign_extend_cache_locs_func`` (the worker's), ``bits_for(tree,
    budget)`` where the verify of that budget reads its ancestor bits [B*N, NW] (``fa3_tree.round_bits_out`` of
    the budget's backend), ``backend_for(budget)`` a context manager making that budget's backend the target's
    (budget auto's ``VerifyWidths.active``) around each capture. ``capture=False`` (CPU tests) runs each head
    eagerly over the same static buffers instead of replaying a graph."""

    def __init__(self, *, batch_sizes: Sequence[int], budgets: Sequence[int], depth: int, topk: int, device,
                 req_to_token: torch.Tensor, mask_capacity: int, slots: Callable, bits_for: Callable,
                 backend_for: Optional[Callable] = None, capture: bool = True):
        self.batch_sizes = sorted({int(b) for b in batch_sizes})
        self.budgets = tuple(sorted({int(b) for b in budgets}))
        if not self.batch_sizes or not self.budgets or min(self.budgets) < 1 or mask_capacity < 0:
            raise ValueError(f"TreeHeads needs batch sizes, budgets >= 1 and mask_capacity >= 0, got "
                             f"{self.batch_sizes}, {self.budgets}, {mask_capacity}")
        self.device, self.depth, self.topk = torch.device(device), int(depth), int(topk)
        self.req_to_token, self.slots, self.capture = req_to_token, slots, bool(capture)
        self.mask_capacity = int(mask_capacity)
        top, n_max = self.batch_sizes[-1], max(self.budgets) + 1
        dev = self.device
        # static inputs, B rows read by a head of batch size B
        self.prefix = torch.zeros(top, dtype=torch.int64, device=dev)
        self.req_pool_indices = torch.zeros(top, dtype=torch.int64, device=dev)
        self.bonus = torch.zeros(top, dtype=torch.int64, device=dev)
        self.log_probs = torch.zeros(top, self.depth, self.topk, dtype=torch.float32, device=dev)
        self.token_ids = torch.zeros(top, self.depth, self.topk, dtype=torch.int64, device=dev)
        self.mask = torch.zeros(full_mask_numel(self.mask_capacity, top, n_max), dtype=torch.bool, device=dev)
        self._dirty = 0  # rows of prefix / req_pool_indices written since they were last zeroed past a round's bs
        self._heads: Dict[Tuple[int, int], tuple] = {}  # (B, budget) -> (graph or None, outputs, bits)
        pool = torch.cuda.graph_pool_handle() if self.capture else None
        for budget in self.budgets:
            with (backend_for(budget) if backend_for is not None else contextlib.nullcontext()):
                for bs in reversed(self.batch_sizes):  # largest first, as upstream captures (the pool's peak)
                    bits = bits_for(Tree.make_dummy(bs, budget, dev, max_depth=self.depth), budget)
                    self._heads[(bs, budget)] = self._make(bs, budget, bits, pool)

    def _run(self, bs: int, budget: int, bits: torch.Tensor):
        n = budget + 1
        prefix = self.prefix[:bs]
        verify_loc = self.slots(req_pool_indices=self.req_pool_indices[:bs], req_to_token=self.req_to_token,
                                start_offset=prefix, end_offset=prefix + n, batch_size=bs, draft_token_num=n,
                                device=self.device)
        tree = build_tree(self.log_probs[:bs], self.token_ids[:bs], budget, self.bonus[:bs])
        topo = build_verify_topology(tree, prefix, self.mask_capacity, with_tree_mask=False,
                                     custom_mask_out=self.mask, bits_out=bits)
        return verify_loc, tree, topo

    def _make(self, bs: int, budget: int, bits: torch.Tensor, pool):
        if not self.capture:
            return None, None, bits
        self._run(bs, budget, bits)  # compiles this shape's kernels outside the capture
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            out = self._run(bs, budget, bits)
        return graph, out, bits

    def padded(self, bs: int, budget: int, mask_sum_bound: int) -> Optional[int]:
        """The captured batch size a round of ``bs`` requests at ``budget`` replays (the smallest >= bs), or None
        when no head covers it: another budget, a larger batch, or a host bound of the prefix lengths' sum
        (``mask_sum_bound``) above the mask's capacity."""
        if budget not in self.budgets or mask_sum_bound > self.mask_capacity:
            return None
        i = bisect.bisect_left(self.batch_sizes, bs)
        return self.batch_sizes[i] if i < len(self.batch_sizes) else None

    def __call__(self, size: int, bs: int, budget: int, log_probs, token_ids, bonus, prefix,
                 req_pool_indices) -> Head:
        """Copy the round's inputs into the static buffers of batch size ``size`` (``padded``) and replay that
        head; returns its outputs' first ``bs`` rows. No host sync."""
        if self._dirty > bs:  # padded rows read prefix 0 and slot 0 (written inside every buffer)
            self.prefix[bs:self._dirty].zero_()
            self.req_pool_indices[bs:self._dirty].zero_()
        self._dirty = bs
        self.prefix[:bs].copy_(prefix)
        self.req_pool_indices[:bs].copy_(req_pool_indices)
        self.bonus[:bs].copy_(bonus)
        self.log_probs[:bs].copy_(log_probs)
        self.token_ids[:bs].copy_(token_ids)
        graph, out, bits = self._heads[(size, budget)]
        if graph is None:  # capture=False: the same calls, eagerly, over the same buffers
            out = self._run(size, budget, bits)
        else:
            graph.replay()
        verify_loc, tree, topo = out
        n = budget + 1
        return Head(verify_loc=verify_loc[:bs * n], tree=_rows(tree, bs), mask=self.mask,
                    positions=topo.positions[:bs * n], retrieve_index=topo.retrieve_index[:bs],
                    retrieve_next_token=topo.retrieve_next_token[:bs],
                    retrieve_next_sibling=topo.retrieve_next_sibling[:bs], tree_bits=topo.tree_bits[:bs * n])

    def describe(self) -> str:
        return (f"{len(self._heads)} heads (batch sizes {self.batch_sizes[0]}..{self.batch_sizes[-1]} x budgets "
                f"{list(self.budgets)}), FULL_MASK buffer {self.mask.numel() / 2 ** 20:.1f} MiB for "
                f"{self.mask_capacity} prefix tokens")
