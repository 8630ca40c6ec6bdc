"""Readable references for the tree ops: the paper's best-first heap and pure-PyTorch batched versions.

Serves build tree -> verify topology -> accept. ``build_tree_reference`` is the oracle (Algorithm 1 of
Ringel & Romano, arXiv 2604.12989, for ONE request, plain Python). The ``*_torch`` functions are the
batched, fixed-shape, host-sync-free formulation of DESIGN.md written with PyTorch ops: the CPU path of
the public API and what the Triton kernels are tested against. ``reconstruct_indices_reference``
re-derives, from a tree mask, what ``sgl_kernel.reconstruct_indices_from_tree_mask`` computes.
"""

from __future__ import annotations

import heapq
import struct
from typing import Optional

import torch

from sglang_ddtree.tree._ordkey import key_code, key_index, make_key, ord_score, score_ord
from sglang_ddtree.tree.metadata import AcceptResult, Tree, VerifyTopology

_NEG_INF = float("-inf")


def _f32(x: float) -> float:
    """Round a double to float32 (the sum of two float32 values rounds exactly like a float32 add).

    ``+ 0.0`` folds -0.0 onto +0.0, as the batched paths do.
    """
    return struct.unpack("f", struct.pack("f", x))[0] + 0.0


def _tree_from_rows(rows, root_token_id, budget, max_depth, top_token_ids) -> Tree:
    n = budget + 1
    tok = [int(root_token_id)] + [0] * budget
    par, dep = [-1] * n, [0] * n
    sc = [0.0] + [_NEG_INF] * budget
    row_of = {(): 0}
    for r, (path, score, _) in enumerate(rows, start=1):
        row_of[path] = r
        tok[r] = int(top_token_ids[len(path) - 1][path[-1]])
        par[r], dep[r], sc[r] = row_of[path[:-1]], len(path), score
    num = len(rows) + 1
    return Tree(
        token_ids=torch.tensor([tok], dtype=torch.int64),
        parents=torch.tensor([par], dtype=torch.int64),
        depths=torch.tensor([dep], dtype=torch.int64),
        scores=torch.tensor([sc], dtype=torch.float32),
        valid=torch.tensor([[r < num for r in range(n)]]),
        num_nodes=torch.tensor([num], dtype=torch.int32),
        max_depth=max_depth,
    )


def build_tree_reference(
    top_log_probs: torch.Tensor, top_token_ids: torch.Tensor, budget: int, root_token_id: int = 0
) -> Tree:
    """Best-first heap (paper Algorithm 1) for ONE request; returns a batch-of-one CPU ``Tree``.

    Shape: top_log_probs [L-1, K] float32 (each row sorted descending), top_token_ids [L-1, K] int64.
    Log-probs above 0 are clamped to 0; NaN counts as -inf (a drafter whose logits hold a NaN gives a NaN
    logsumexp, so the whole position is NaN: its drafts become the least likely nodes, never above a real
    one). A node's score is the float32 sum of log-probs on its root path,
    added root to leaf. Total order (ties included): higher score first, then lower depth, then the
    parents' scores compared leaf to root (higher first), then the rank path (k_1..k_d) lexicographic.
    Every node follows its parent and its previous sibling in this order, so the heap pops nodes in it
    and the ``budget`` nodes popped first are the tree. Rows: by depth, then in this order (which
    within one depth is: higher score, then lower parent row, then lower rank).
    """
    assert top_log_probs.dim() == 2 and top_log_probs.shape == top_token_ids.shape
    assert budget >= 1
    depth_limit, k_all = top_log_probs.shape
    k_eff = min(k_all, budget)
    lp = [[float("-inf") if x != x else min(float(x), 0.0) for x in row[:k_eff]]
          for row in top_log_probs.float().tolist()]
    for row in lp:
        assert all(a >= b for a, b in zip(row, row[1:])), "top_log_probs rows must be sorted descending"
    tok = top_token_ids.tolist()

    heap: list = []

    def push(path: tuple, prefix_scores: tuple) -> None:
        key = (-prefix_scores[-1], len(path), tuple(-s for s in reversed(prefix_scores[:-1])), path)
        heapq.heappush(heap, (key, path, prefix_scores))

    push((0,), (_f32(lp[0][0]),))
    popped = []
    while heap and len(popped) < budget:
        _, path, scores = heapq.heappop(heap)
        order_key = (-scores[-1],) + tuple(-x for x in reversed(scores[:-1])) + path  # within a depth
        popped.append((path, scores[-1], order_key))
        depth, k = len(path), path[-1]
        if k + 1 < k_eff:  # next sibling
            parent_score = scores[-2] if depth > 1 else 0.0
            push(path[:-1] + (k + 1,), scores[:-1] + (_f32(parent_score + lp[depth - 1][k + 1]),))
        if depth < depth_limit:  # first child
            push(path + (0,), scores + (_f32(scores[-1] + lp[depth][0]),))
    popped.sort(key=lambda item: (len(item[0]), item[2]))  # depth, then the order above
    return _tree_from_rows(popped, root_token_id, budget, depth_limit, tok)


# ----------------------------------------------------------------------------------------------------
# Batched build (pure PyTorch): per-depth top-budget of (kept parents x top-K), then global top-budget.
# ----------------------------------------------------------------------------------------------------


def _select_per_depth(lp: torch.Tensor, budget: int):
    """Sorted top-``budget`` frontier of every depth. Returns per-depth (keys, parent_slot, rank)."""
    bs, depth_limit, k_eff = lp.shape
    f_score = torch.zeros(bs, 1, dtype=torch.float32, device=lp.device)
    f_valid = torch.ones(bs, 1, dtype=torch.bool, device=lp.device)
    levels = []
    for d in range(depth_limit):
        width = f_score.shape[1]
        cand = f_score[:, :, None] + lp[:, d, None, :]  # [bs, F, K] float32
        code = torch.where(f_valid[:, :, None], score_ord(cand), 0)
        index = torch.arange(width * k_eff, device=lp.device).view(width, k_eff)
        key = make_key(code, index).view(bs, width * k_eff)
        top = key.topk(min(budget, width * k_eff), dim=1).values  # [bs, F'] int64, descending
        f_valid = key_code(top) > 0
        f_score = torch.where(f_valid, ord_score(key_code(top)), _NEG_INF)
        c = key_index(top)
        levels.append((torch.where(f_valid, top, 0), c // k_eff, c % k_eff))
    return levels


def _count_selected(levels, budget: int) -> list[torch.Tensor]:
    """Per depth, how many leading frontier slots are in the global top-``budget`` ([bs] int64 each).

    Global order: higher score, then lower depth, then frontier slot (each frontier is sorted in it).
    """
    gkeys = []
    for d, (keys, _, _) in enumerate(levels):
        slot = torch.arange(keys.shape[1], device=keys.device)
        gkeys.append(make_key(key_code(keys), d * budget + slot))
    allkeys = torch.cat(gkeys, dim=1)
    thr = allkeys.topk(min(budget, allkeys.shape[1]), dim=1).values[:, -1:]
    return [((g >= thr) & (key_code(g) > 0)).sum(1) for g in gkeys]


def build_tree_torch(
    top_log_probs: torch.Tensor,
    top_token_ids: torch.Tensor,
    budget: int,
    root_token_ids: Optional[torch.Tensor] = None,
) -> Tree:
    """Batched exact builder written with PyTorch ops (CPU path and readable reference of the kernel).

    Shape: top_log_probs [bs, L-1, K] float32, top_token_ids [bs, L-1, K] int64, root_token_ids [bs]
    int64 or None -> Tree with N = budget + 1 rows. Same node set, order and pads as the heap.
    """
    bs, depth_limit, k_all = top_log_probs.shape
    dev = top_log_probs.device
    n = budget + 1
    k_eff = min(k_all, budget)
    lp = top_log_probs[:, :, :k_eff].float()
    lp = torch.where(lp.isnan(), float("-inf"), lp.clamp(max=0.0))
    levels = _select_per_depth(lp, budget)
    counts = _count_selected(levels, budget)

    tok = torch.zeros(bs, n + 1, dtype=torch.int64, device=dev)  # column n is a dump for pads
    par = torch.full((bs, n + 1), -1, dtype=torch.int64, device=dev)
    dep = torch.zeros(bs, n + 1, dtype=torch.int64, device=dev)
    sc = torch.full((bs, n + 1), _NEG_INF, dtype=torch.float32, device=dev)
    sc[:, 0] = 0.0
    if root_token_ids is not None:
        tok[:, 0] = root_token_ids
    base_prev = torch.zeros(bs, dtype=torch.int64, device=dev)  # row of slot 0 one depth up
    base = torch.ones(bs, dtype=torch.int64, device=dev)
    for d, ((keys, pslot, rank), cnt) in enumerate(zip(levels, counts)):
        slot = torch.arange(keys.shape[1], device=dev)[None, :]
        row = torch.where(slot < cnt[:, None], base[:, None] + slot, n)  # kept slots, in order
        tok.scatter_(1, row, top_token_ids[:, d].gather(1, rank))
        par.scatter_(1, row, base_prev[:, None] + pslot if d > 0 else torch.zeros_like(row))
        dep.scatter_(1, row, torch.full_like(row, d + 1))
        sc.scatter_(1, row, ord_score(key_code(keys)))
        base_prev, base = base, base + cnt
    rows = torch.arange(n, device=dev)
    valid = rows[None, :] < base[:, None]
    return Tree(
        token_ids=tok[:, :n].contiguous(),
        parents=torch.where(valid, par[:, :n], -1),
        depths=dep[:, :n].contiguous(),
        scores=torch.where(valid, sc[:, :n], _NEG_INF),
        valid=valid,
        num_nodes=base.to(torch.int32),
        max_depth=depth_limit,
    )


# ----------------------------------------------------------------------------------------------------
# Verify topology (pure PyTorch)
# ----------------------------------------------------------------------------------------------------


def tree_mask_torch(tree: Tree) -> torch.Tensor:
    """Ancestor-or-self mask. Shape: -> [bs, N, N] bool; pad rows see only themselves."""
    bs, n = tree.parents.shape
    rows = torch.arange(n, device=tree.parents.device).expand(bs, n)
    mask = torch.zeros(bs, n, n + 1, dtype=torch.bool, device=rows.device)
    cur = rows.clone()
    for _ in range(tree.max_depth + 1):
        mask.scatter_(2, torch.where(cur >= 0, cur, n)[..., None], True)
        cur = torch.where(cur >= 0, tree.parents.gather(1, cur.clamp(min=0)), -1)
    return mask[..., :n].contiguous()


def tree_bits_torch(tree_mask: torch.Tensor) -> torch.Tensor:
    """The tree mask's rows as 32-column bit words: bit j % 32 of word j // 32 of row b*N + i = tree_mask[b, i, j]
    (bits past N zero). Shape: [bs, N, N] bool -> [bs*N, NW] int32, NW = cdiv(N, 32)."""
    bs, n, _ = tree_mask.shape
    nw = (n + 31) // 32
    padded = torch.zeros(bs, n, nw * 32, dtype=torch.int64, device=tree_mask.device)
    padded[..., :n] = tree_mask.to(torch.int64)
    weights = torch.ones((), dtype=torch.int64, device=tree_mask.device) << torch.arange(32, device=tree_mask.device)
    words = (padded.view(bs, n, nw, 32) * weights).sum(-1)  # [bs, N, NW] in [0, 2^32)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32).view(bs * n, nw)


def full_mask_torch(tree_mask: torch.Tensor, seq_lens: torch.Tensor, seq_lens_sum: int) -> torch.Tensor:
    """FULL_MASK custom mask: per request N x (seq_lens[b] + N), prefix all True, row-major, concatenated.

    Shape: tree_mask [bs, N, N] bool, seq_lens [bs] int, seq_lens_sum host int >= seq_lens.sum()
    -> [seq_lens_sum * N + bs * N * N] bool; elements past the last request's rows are True.
    """
    bs, n, _ = tree_mask.shape
    dev = tree_mask.device
    seq = seq_lens.to(torch.int64)
    width = seq + n
    ends = (width * n).cumsum(0)
    flat = torch.arange(seq_lens_sum * n + bs * n * n, device=dev)
    b_raw = torch.searchsorted(ends, flat, right=True)  # request of each element; bs past the end
    b = b_raw.clamp(max=max(bs - 1, 0))
    local = flat - (ends - width * n)[b]
    r, c = (local // width[b]).clamp(max=n - 1), local % width[b] - seq[b]
    return (c < 0) | (b_raw >= bs) | tree_mask[b, r, c.clamp(min=0)]


def retrieve_indices_torch(tree: Tree):
    """(retrieve_index, retrieve_next_token, retrieve_next_sibling), each [bs, N] int64, from parents.

    next_token = lowest row among the children; next_sibling = next higher row with the same parent.
    """
    bs, n = tree.parents.shape
    rows = torch.arange(n, device=tree.parents.device).expand(bs, n)
    has_parent = tree.parents >= 0
    first = torch.full((bs, n + 1), n, dtype=torch.int64, device=rows.device)
    first.scatter_reduce_(1, torch.where(has_parent, tree.parents, n), rows, reduce="amin")
    next_token = torch.where(first[:, :n] < n, first[:, :n], -1)
    # rows sorted by (parent, row): a row's next sibling is the next entry if it has the same parent
    order = torch.sort(torch.where(has_parent, tree.parents, n) * n + rows, dim=1).values
    o_par, o_row = order // n, order % n
    same = torch.cat([o_par[:, 1:] == o_par[:, :-1], torch.zeros_like(o_par[:, :1], dtype=torch.bool)], 1)
    nxt = torch.cat([o_row[:, 1:], torch.zeros_like(o_row[:, :1])], 1)
    sib_sorted = torch.where(same & (o_par < n), nxt, -1)
    next_sibling = torch.empty_like(next_token).scatter_(1, o_row, sib_sorted)
    b = torch.arange(bs, device=rows.device)[:, None]
    return b * n + rows, next_token, next_sibling


def build_verify_topology_torch(
    tree: Tree,
    seq_lens: torch.Tensor,
    seq_lens_sum: Optional[int] = None,
    with_tree_mask: bool = True,
    with_tree_bits: bool = False,
) -> VerifyTopology:
    """PyTorch version of :func:`sglang_ddtree.tree.build_verify_topology` (same outputs; ``with_tree_bits``: the
    ancestor bit words, as ``bits_out`` there receives them)."""
    mask = tree_mask_torch(tree)
    index, next_token, next_sibling = retrieve_indices_torch(tree)
    positions = (seq_lens.to(torch.int64)[:, None] + tree.depths).reshape(-1)
    full = None if seq_lens_sum is None else full_mask_torch(mask, seq_lens, seq_lens_sum)
    return VerifyTopology(
        positions=positions,
        retrieve_index=index,
        retrieve_next_token=next_token,
        retrieve_next_sibling=next_sibling,
        tree_mask=mask if with_tree_mask else None,
        custom_mask=full,
        tree_bits=tree_bits_torch(mask) if with_tree_bits else None,
    )


def reconstruct_indices_reference(tree_mask: torch.Tensor, seq_lens: torch.Tensor):
    """What ``sgl_kernel.reconstruct_indices_from_tree_mask`` derives from a mask, in PyTorch.

    Shape: tree_mask [bs, N, N] bool (row i attends column j), seq_lens [bs] int -> positions [bs*N],
    retrieve_index, retrieve_next_token, retrieve_next_sibling [bs, N], all int64. Semantics of the
    upstream kernel: depth = #masked columns before i; parent = highest such column; next_token = lowest
    row after i that masks column i; next_sibling = lowest row after i whose parent is i's parent.
    """
    bs, n, _ = tree_mask.shape
    dev = tree_mask.device
    idx = torch.arange(n, device=dev)
    below = tree_mask & (idx[None, None, :] < idx[None, :, None])  # [b, i, j]: j < i and masked
    depth = below.sum(-1)
    parent = torch.where(below, idx, -1).max(-1).values  # [bs, N]
    after = tree_mask.transpose(1, 2) & (idx[None, :, None] < idx[None, None, :])  # [b, i, j]: j > i
    next_token = torch.where(after, idx, n).min(-1).values
    same_parent = (parent[:, None, :] == parent[:, :, None]) & (parent[:, :, None] >= 0)
    later = same_parent & (idx[None, :, None] < idx[None, None, :])
    next_sibling = torch.where(later, idx, n).min(-1).values
    positions = (depth + seq_lens.to(torch.int64)[:, None]).reshape(-1)
    index = torch.arange(bs, device=dev)[:, None] * n + idx
    no = torch.full_like(next_token, -1)
    return (
        positions,
        index,
        torch.where(next_token < n, next_token, no),
        torch.where(next_sibling < n, next_sibling, no),
    )


# ----------------------------------------------------------------------------------------------------
# Greedy acceptance (pure PyTorch)
# ----------------------------------------------------------------------------------------------------


def accept_greedy_torch(tree: Tree, target_tokens: torch.Tensor) -> AcceptResult:
    """Walk from the root while the target's token equals a child's token; no host sync.

    Shape: target_tokens [bs, N] int64 (the target's argmax at every row) -> AcceptResult.
    """
    bs, n = tree.parents.shape
    dev = tree.parents.device
    rows = torch.arange(n, device=dev)
    cur = torch.zeros(bs, 1, dtype=torch.int64, device=dev)
    alive = torch.ones(bs, 1, dtype=torch.bool, device=dev)
    cols = [torch.zeros(bs, dtype=torch.int64, device=dev)]
    target = target_tokens.to(torch.int64)
    for _ in range(tree.max_depth):
        t = target.gather(1, cur)
        hit = (tree.parents == cur) & (tree.token_ids == t) & tree.valid & alive
        nxt = torch.where(hit, rows, n).min(1, keepdim=True).values
        alive = nxt < n
        cur = torch.where(alive, nxt, cur)
        cols.append(torch.where(alive, nxt, -1).squeeze(1))
    accepted = torch.stack(cols, dim=1).to(torch.int32)
    return AcceptResult(
        num_accepted=(accepted[:, 1:] >= 0).sum(1).to(torch.int32),
        accepted_node_idx=accepted,
        bonus_token=target.gather(1, cur).squeeze(1),
    )


def sample_target_only_reference(
    tree: Tree, target_probs: torch.Tensor, generator: Optional[torch.Generator] = None
) -> list[int]:
    """Target-only tree sampling for ONE request (upstream semantics, thresholds 1); host loop.

    Shape: tree batch of one, target_probs [N, V] float (the target's distribution after each row).
    Returns the emitted tokens: accepted nodes' tokens, then the bonus token. At each node one uniform u;
    child i (row order) is accepted iff u <= p(x_1) + ... + p(x_i); otherwise the bonus is drawn from p
    with the children removed. Each emitted token is one exact draw from p (see the package docstring).
    """
    parents, tokens = tree.parents[0].tolist(), tree.token_ids[0].tolist()
    children: dict[int, list[int]] = {}
    for r in range(1, int(tree.num_nodes[0])):
        children.setdefault(parents[r], []).append(r)
    out, cur = [], 0
    while True:
        p = target_probs[cur].double()
        u = float(torch.rand((), generator=generator, dtype=torch.float64))
        acc, nxt = 0.0, None
        for c in children.get(cur, []):
            acc += float(p[tokens[c]])
            if u <= acc:
                nxt = c
                break
        if nxt is None:
            residual = p.clone()
            residual[[tokens[c] for c in children.get(cur, [])]] = 0.0
            out.append(int(torch.multinomial(residual / residual.sum(), 1, generator=generator)))
            return out
        out.append(tokens[nxt])
        cur = nxt
