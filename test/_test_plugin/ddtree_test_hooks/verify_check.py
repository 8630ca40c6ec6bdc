"""Node-by-node check of tree-verify logits against plain sequences (pure PyTorch; CPU-testable).

The VERIFY dump (``hooks.after_verify_dump``) holds, per round, each request's tree (tokens, positions,
``retrieve_next_token`` / ``retrieve_next_sibling``) and the target's verify logits of every row. A row's
logits must be the target's next-token logits after its ROOT PATH run as a plain sequence: the committed
context (prompt + output)[:P], then the tokens root .. row. Pads (rows no link reaches) see the prefix and
themselves only, so theirs is context + [pad token]. ``collect_nodes`` builds those sequences,
``reference_log_probs`` runs them through a reference model (causal, right-padded), ``node_errors`` gives
per-row max |log-softmax difference| over the candidates (both sides' top-k). ``corrupt_full_mask`` is the
control: a FULL_MASK whose tree part is causal over rows (each row also sees the rows just before it).
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import os
from typing import Dict, List, Sequence, Tuple

import torch


class DumpMismatch(AssertionError):
    """A dump contradicts what the engine returned or what the FULL_MASK contract says."""


# ---- tree structure from the retrieve links ------------------------------------------------------
def parents_from_links(next_token: Sequence[int], next_sibling: Sequence[int]) -> Tuple[List[int], List[bool]]:
    """Shape: next_token, next_sibling [N] ints (first child / next sibling row, -1 none) -> (parents [N],
    -1 for the root and for rows no link reaches; reachable [N]). Walks from row 0; raises ``ValueError``
    on a row reached twice, a child row not after its parent, siblings out of ascending order or a link
    out of range."""
    nt, ns = [int(x) for x in next_token], [int(x) for x in next_sibling]
    n = len(nt)
    if len(ns) != n or n == 0:
        raise ValueError(f"links of different lengths {len(nt)} / {len(ns)}")
    parents, reachable, stack = [-1] * n, [False] * n, [0]
    reachable[0] = True
    while stack:
        u = stack.pop()
        c = nt[u]
        while c != -1:
            if not u < c < n:
                raise ValueError(f"row {u}: child link {c} must lie in ({u}, {n})")
            if reachable[c]:
                raise ValueError(f"row {c} reached twice")
            reachable[c], parents[c] = True, u
            stack.append(c)
            if ns[c] != -1 and ns[c] <= c:
                raise ValueError(f"row {c}: next sibling {ns[c]} must come after it")
            c = ns[c]
    return parents, reachable


def depths_from_parents(parents: Sequence[int]) -> List[int]:
    """Root 0, a node its parent's depth + 1, unreachable rows 0 (parents precede children)."""
    depths = [0] * len(parents)
    for i, p in enumerate(parents):
        depths[i] = depths[p] + 1 if p >= 0 else 0
    return depths


def root_path(tokens: Sequence[int], parents: Sequence[int], row: int) -> List[int]:
    """Tokens from the root to ``row`` (a pad's path is its own token: it sees only itself)."""
    path = [int(tokens[row])]
    while parents[row] >= 0:
        row = parents[row]
        path.append(int(tokens[row]))
    return path[::-1]


def branching_by_depth(parents: Sequence[int], depths: Sequence[int]) -> Dict[int, int]:
    """{depth d: rows at depth d with >= 2 children}."""
    kids = collections.Counter(p for p in parents if p >= 0)
    return dict(collections.Counter(depths[r] for r, k in kids.items() if k >= 2))


def causal_corruption_affects(parents: Sequence[int]) -> List[bool]:
    """Rows whose view changes when the tree mask is made causal over rows: row i is unaffected only when
    rows 0..i form a chain (then 0..i are exactly its ancestors and itself)."""
    out, chain = [], True
    for i, p in enumerate(parents):
        chain = chain and (i == 0 or p == i - 1)
        out.append(not chain)
    return out


# ---- the FULL_MASK layout and its corruption -----------------------------------------------------
def _tree_part_index(prefix_lens: torch.Tensor, n: int) -> torch.Tensor:
    """Flat FULL_MASK index of every tree-part element: [bs, N (row), N (column)] int64. Request b owns
    N rows of width prefix_b + N starting at sum_{b' < b} N * (prefix_b' + N); its prefix columns first."""
    p = prefix_lens.to(torch.int64)
    width = p + n
    start = torch.cumsum(width * n, 0) - width * n
    r = torch.arange(n, device=p.device)
    return (start[:, None, None] + r[None, :, None] * width[:, None, None] + p[:, None, None]
            + r[None, None, :])


def tree_part(mask: torch.Tensor, prefix_lens: torch.Tensor, n: int) -> torch.Tensor:
    """Shape: FULL_MASK [>= sum(N * (prefix + N))] -> [bs, N, N] bool: [b, i, j] = row i sees row j."""
    return mask.reshape(-1)[_tree_part_index(prefix_lens.to(mask.device), n)].bool()


def tree_part_mask(prefix_lens: torch.Tensor, n: int, numel: int) -> torch.Tensor:
    """[numel] bool: True at the FULL_MASK's tree-part elements (what ``corrupt_full_mask`` may change)."""
    out = torch.zeros(numel, dtype=torch.bool, device=prefix_lens.device)
    out[_tree_part_index(prefix_lens, n).reshape(-1)] = True
    return out


def corrupt_full_mask(mask: torch.Tensor, prefix_lens: torch.Tensor, n: int, mode: str = "causal") -> torch.Tensor:
    """A copy of ``mask`` whose tree part is replaced; prefix columns and bytes past the rows untouched.
    mode ``causal``: row i sees rows 0..i (its ancestors, but also every earlier sibling, cousin, pad).
    Shape: mask [M] bool / uint8 FULL_MASK, prefix_lens [bs] int (same device) -> [M], mask's dtype."""
    if mode != "causal":
        raise ValueError(f"unknown mask corruption {mode!r}")
    out = mask.clone()
    idx = _tree_part_index(prefix_lens.to(mask.device), n)
    r = torch.arange(n, device=mask.device)
    causal = (r[None, :] <= r[:, None]).expand(idx.shape[0], n, n)
    out.view(-1)[idx.reshape(-1)] = causal.reshape(-1).to(out.dtype)
    return out


# ---- dumps -> nodes with their plain sequences ---------------------------------------------------
def load_rounds(dump_dir: str) -> List[dict]:
    paths = sorted(glob.glob(os.path.join(dump_dir, "round_*.pt")))
    return [torch.load(p, map_location="cpu", weights_only=True) for p in paths]


def plain_context(prompt_ids: Sequence[int], output_ids: Sequence[int], prefix_len: int, root: int,
                  where: str = "") -> List[int]:
    """(prompt + output)[:P], after checking that (prompt + output)[P] is the round's root token (the
    engine's final output is the true continuation, and a round's root is its last committed token)."""
    seq = list(prompt_ids) + list(output_ids)
    if not 0 <= prefix_len < len(seq) or seq[prefix_len] != int(root):
        got = seq[prefix_len] if 0 <= prefix_len < len(seq) else None
        raise DumpMismatch(f"{where}: (prompt + output)[{prefix_len}] = {got}, but the round's root is {root} "
                           f"(prompt {len(prompt_ids)}, output {len(output_ids)} tokens)")
    return seq[:prefix_len]


@dataclasses.dataclass
class Nodes:
    """Every recorded row, flat (M rows). Sequences end with the row's own token."""

    where: List[str]  # "rid/round/row"
    depth: List[int]
    pad: List[bool]
    affected: List[bool]  # changed by the causal corruption (``causal_corruption_affects``)
    first_round: List[bool]  # the request's first recorded round (its prefix KV came from prefill)
    sequences: List[List[int]]
    engine_logits: torch.Tensor  # [M, V] float32
    branching: Dict[int, int]  # summed over trees: {depth: rows with >= 2 children}
    pad_rows: int
    trees: int
    cuda_graph_rounds: int
    corrupted_rounds: int
    rounds: int


def collect_nodes(rounds: Sequence[dict], requests: Dict[str, Tuple[Sequence[int], Sequence[int]]]) -> Nodes:
    """``requests``: rid -> (prompt ids, the engine's output ids). Rows of rids not in it are skipped.
    Checks per tree: links well formed, positions == P + depth (pads: P), root == (prompt + output)[P]."""
    where, depth, pad, affected, first, seqs, logits = [], [], [], [], [], [], []
    branching, seen = collections.Counter(), set()
    pad_rows = trees = graphs = 0
    for rec in rounds:
        n = int(rec["n"])
        graphs += bool(rec["cuda_graph"])
        for b, rid in enumerate(rec["rids"]):
            if rid not in requests:
                continue
            trees += 1
            tag = f"{rid}/round {rec['round']}"
            tokens = rec["tokens"][b].tolist()
            parents, reachable = parents_from_links(rec["next_token"][b].tolist(), rec["next_sibling"][b].tolist())
            depths = depths_from_parents(parents)
            p_len = int(rec["prefix_lens"][b])
            want_pos = [p_len + d for d in depths]
            if rec["positions"][b].tolist() != want_pos:
                raise DumpMismatch(f"{tag}: positions {rec['positions'][b].tolist()} != prefix + depth {want_pos}")
            context = plain_context(*requests[rid], p_len, tokens[0], tag)
            branching.update(branching_by_depth(parents, depths))
            hit = causal_corruption_affects(parents)
            for r in range(n):
                where.append(f"{tag}/row {r}")
                depth.append(depths[r])
                pad.append(not reachable[r])
                affected.append(hit[r])
                first.append(rid not in seen)
                seqs.append(context + root_path(tokens, parents, r))
            pad_rows += n - sum(reachable)
            logits.append(rec["logits"][b].float())
        seen.update(rid for rid in rec["rids"] if rid in requests)
    return Nodes(where, depth, pad, affected, first, seqs,
                 torch.cat(logits) if logits else torch.empty(0, 0), dict(branching), pad_rows, trees, graphs,
                 max((int(r.get("corrupted_rounds", 0)) for r in rounds), default=0), len(rounds))


# ---- reference and comparison --------------------------------------------------------------------
@torch.no_grad()
def reference_log_probs(model, sequences: Sequence[Sequence[int]], device, max_batch_tokens: int = 1 << 16) -> torch.Tensor:
    """Next-token log-softmax after each sequence's last token, each run as its own plain causal
    sequence (right-padded in batches; a causal mask never lets a token see the padding after it).
    Shape: M sequences -> [M, V] float32 on the CPU."""
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    out = [None] * len(sequences)
    i = 0
    while i < len(order):  # ascending lengths: a chunk's last sequence is its longest
        j = i + 1
        while j < len(order) and (j - i + 1) * len(sequences[order[j]]) <= max_batch_tokens:
            j += 1
        chunk = order[i:j]
        t = len(sequences[chunk[-1]])
        ids = torch.zeros(len(chunk), t, dtype=torch.int64)
        for k, s in enumerate(chunk):
            ids[k, : len(sequences[s])] = torch.tensor(sequences[s])
        ids = ids.to(device)
        pos = torch.arange(t, device=device).expand(len(chunk), t)
        last = torch.tensor([len(sequences[s]) - 1 for s in chunk], device=device)
        lg = model(ids, pos).logits  # [B, T, V]
        lp = lg[torch.arange(len(chunk), device=device), last].float().log_softmax(-1).cpu()
        for k, s in enumerate(chunk):
            out[s] = lp[k]
        i = j
    return torch.stack(out) if out else torch.empty(0, 0)


def node_errors(engine_logits: torch.Tensor, ref_log_probs: torch.Tensor, k: int = 8) -> torch.Tensor:
    """Per row, max |engine log-softmax - reference log-softmax| over the candidates: the reference's
    top-k and the engine's top-k tokens. Shape: [M, V_engine >= V], [M, V] -> [M] float32."""
    v = ref_log_probs.shape[-1]
    eng = engine_logits[:, :v].float().log_softmax(-1)
    ref = ref_log_probs.float()
    cand = torch.cat([ref.topk(k, -1).indices, eng.topk(k, -1).indices], -1)
    return (eng.gather(-1, cand) - ref.gather(-1, cand)).abs().amax(-1)


def summarize(errors: torch.Tensor, tol: float) -> dict:
    """{n, over (rows above tol), ok, max, p50, p90, p99, p999} of per-row errors."""
    e = errors.float()
    if e.numel() == 0:
        return dict(n=0, over=0, ok=False, max=None)
    q = lambda x: round(float(e.quantile(x)), 4)  # noqa: E731
    over = int((e > tol).sum())
    return dict(n=int(e.numel()), over=over, ok=over == 0, max=round(float(e.max()), 4), p50=q(0.5),
                p90=q(0.9), p99=q(0.99), p999=q(0.999))


def reversed_sibling_links(parents: torch.Tensor):
    """(next_token, next_sibling) [bs, N] int64 with each node's children linked highest row first: the mirror of
    ``tree.reference.retrieve_indices_torch`` (a deliberate fault for the hybrid conv kernel). No host sync."""
    bs, n = parents.shape
    rows = torch.arange(n, device=parents.device).expand(bs, n)
    has_parent = parents >= 0
    last = torch.full((bs, n + 1), -1, dtype=torch.int64, device=parents.device)
    last.scatter_reduce_(1, torch.where(has_parent, parents, n), rows, reduce="amax")
    next_token = last[:, :n].clone()
    order = torch.sort(torch.where(has_parent, parents, n) * n + (n - 1 - rows), dim=1).values
    o_par, o_row = order // n, n - 1 - order % n
    same = torch.cat([o_par[:, 1:] == o_par[:, :-1], torch.zeros_like(o_par[:, :1], dtype=torch.bool)], 1)
    nxt = torch.cat([o_row[:, 1:], torch.zeros_like(o_row[:, :1])], 1)
    sib_sorted = torch.where(same & (o_par < n), nxt, -1)
    next_sibling = torch.empty_like(next_token).scatter_(1, o_row, sib_sorted)
    return next_token, next_sibling
