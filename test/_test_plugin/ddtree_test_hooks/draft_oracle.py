"""TEST-ONLY draft oracle: replaces the drafter's top-K with a planned one (DRAFT step of the round).

Part of the test plugin ``ddtree_test_hooks`` (not of the sglang_ddtree wheel); pure PyTorch.

For a target whose greedy next token depends on the current token only (``next = succ[current]``,
e.g. ``test/worker/_generated_models.py``'s "succ" models), the true continuation of a round's root
(bonus) token is known: c_1 = succ[root], c_d = succ[c_{d-1}]. Per request and round a pseudo-random
plan, a pure function of (root token, root position, seed), picks
  cut a in 0..D         the true token is present at depths 1..a and absent at depth a + 1, so greedy
                        acceptance takes exactly a drafts (D = the tree's max depth);
  branch depth b, rank r  (a >= 1 and budget >= 2D): c_b sits at rank r in 1..K-1, c_d at rank 0 elsewhere.
Other slots hold distinct filler tokens (never the true token of their depth). Log-probs (sorted
descending, <= 0) make the "cheap" ranks (rank 0 everywhere, ranks 0..r at depth b) beat every other
choice and number at most D * (r + 1) <= budget prefixes, so the best-``budget`` tree always holds the
true path: accept lengths and sibling walks are planned, not left to the drafter. The test plugin applies it
eagerly in an AFTER hook of ``DDTreeWorker._draft`` (after any draft CUDA-graph replay, whose static buffers
stay untouched), so it works with and without CUDA graphs: pure tensor ops, no host sync, no per-round Python
randomness. Enabled only by DDTREE_TEST_DRAFT_ORACLE (``ddtree_test_hooks.env``); unset, the hook is not
even registered and production pays nothing. Output stays lossless whatever the plan.

For a target that is not context-free (the hybrid fixture's plain weights, whose recurrent state moves the
logits), a "replay" spec gives the continuation instead: the target's own greedy outputs of a reference run
(prompt + output ids per request). The oracle looks up (root position, root token) in a sorted key table on
the device (``torch.searchsorted``, no host sync) and plans around the next D tokens of the matching
sequence; a root off every sequence (after a divergence) gets an arbitrary continuation, so that round
accepts little: the plan shapes the draft only.
"""

from __future__ import annotations

import json
import logging
from typing import List, NamedTuple, Optional, Sequence

import torch

logger = logging.getLogger(__name__)

_M31 = (1 << 31) - 1
_MUL = 0x45D9F3B  # < 2**27: (x < 2**31) * _MUL stays below 2**58, no int64 overflow
CHEAP_FIRST, CHEAP_STEP = -0.05, 0.1  # log-probs of the cheap ranks: -0.05, -0.15, ...
EXPENSIVE_STEP = 0.5


def _mix(x):
    """Integer hash of values in [0, 2**31) -> [0, 2**31) (two rounds of a multiply-xorshift); works
    on int64 tensors and on Python ints alike."""
    x = ((x >> 16) ^ x) * _MUL & _M31
    x = ((x >> 16) ^ x) * _MUL & _M31
    return (x >> 16) ^ x


def max_branch_rank(topk: int, budget: int, max_accept: int) -> int:
    """Largest branch rank r whose cheap prefixes (<= max_accept * (r + 1)) all fit in ``budget``."""
    if max_accept < 1:
        return 0
    return max(0, min(topk - 1, budget // max_accept - 1))


class OraclePlan(NamedTuple):
    """One plan per request. Shape: [bs] int64 each."""

    cut: torch.Tensor  # a: drafts the target will accept (true token present at depths 1..a)
    branch_depth: torch.Tensor  # b in 1..a, or 0 (no branch)
    branch_rank: torch.Tensor  # r in 1..K-1 (rank of c_b at depth b), or 0 (no branch)


def oracle_plan(roots: torch.Tensor, positions: torch.Tensor, *, seed: int, max_accept: int,
                max_rank: int) -> OraclePlan:
    """Shape: roots [bs] int (root tokens), positions [bs] int (root positions). Uniform cut in
    0..max_accept; if cut >= 1 and max_rank >= 1 a branch at a uniform depth 1..cut, rank 1..max_rank."""
    seed_h = _mix((int(seed) * 0x9E3779B1) & _M31)  # a Python int: no host -> device copy per round
    h = _mix((roots.to(torch.int64) & _M31) ^ _mix((positions.to(torch.int64) & _M31) ^ seed_h))
    cut = _mix(h ^ 1) % (max_accept + 1)
    has_branch = cut >= 1 if max_rank >= 1 else torch.zeros_like(cut, dtype=torch.bool)
    branch_depth = torch.where(has_branch, 1 + _mix(h ^ 2) % cut.clamp(min=1), 0)
    branch_rank = torch.where(has_branch, 1 + _mix(h ^ 3) % max(max_rank, 1), 0)
    return OraclePlan(cut, branch_depth, branch_rank)


def true_continuation(roots: torch.Tensor, succ: torch.Tensor, depth: int) -> torch.Tensor:
    """Shape: roots [bs] int, succ [V] int64 -> [bs, depth] int64 (c_1 .. c_depth)."""
    out, cur = [], roots.to(torch.int64)
    for _ in range(depth):
        cur = succ[cur]
        out.append(cur)
    return torch.stack(out, dim=1)


def oracle_topk(roots: torch.Tensor, positions: torch.Tensor, succ: torch.Tensor, *, depth: int, topk: int,
                seed: int, max_accept: int, max_rank: int):
    """The planned draft top-K for a successor-map target.

    Shape: roots [bs] int, positions [bs] int, succ [V] int64 (all on one device); depth = L - 1 block
    positions; 1 <= topk <= V - 1. Returns (log_probs [bs, depth, topk] float32 sorted descending, all
    <= 0; ids [bs, depth, topk] int64 distinct per position, in [0, V)) and the ``OraclePlan``.
    """
    return planned_topk(roots, positions, true_continuation(roots, succ, depth), succ.shape[0], topk=topk,
                        seed=seed, max_accept=max_accept, max_rank=max_rank)


def planned_topk(roots: torch.Tensor, positions: torch.Tensor, cont: torch.Tensor, vocab: int, *, topk: int,
                 seed: int, max_accept: int, max_rank: int):
    """``oracle_topk`` around a given continuation. Shape: cont [bs, D] int64 in [0, vocab) (c_1 .. c_D)."""
    depth = cont.shape[1]
    assert 1 <= topk <= vocab - 1 and depth >= 1, (topk, vocab, depth)
    dev = cont.device
    plan = oracle_plan(roots, positions, seed=seed, max_accept=max_accept, max_rank=max_rank)
    d = torch.arange(1, depth + 1, device=dev)  # [D] 1-based depth
    j = torch.arange(topk, device=dev)  # [K] rank
    present = d.unsqueeze(0) <= plan.cut.unsqueeze(1)  # [bs, D]
    at_branch = d.unsqueeze(0) == plan.branch_depth.unsqueeze(1)  # [bs, D]
    rank = torch.where(at_branch, plan.branch_rank.unsqueeze(1), 0)  # [bs, D] rank of c_d if present
    # Fillers f_0..f_{K-1} per depth: c_d + shift, shifts K distinct values in 1..V-1 (never c_d).
    h = _mix(((roots.to(torch.int64) & _M31).unsqueeze(1) * 64 + d.unsqueeze(0)) & _M31)  # [bs, D]
    shift = 1 + (h.unsqueeze(2) + j) % (vocab - 1)  # [bs, D, K]
    fillers = (cont.unsqueeze(2) + shift) % vocab
    insert = present.unsqueeze(2)
    src = j - ((j > rank.unsqueeze(2)) & insert).to(torch.int64)  # fillers slide past the true token
    ids = fillers.gather(2, src)
    ids = torch.where(insert & (j == rank.unsqueeze(2)), cont.unsqueeze(2), ids)
    # Cheap ranks: 0..r at the branch depth, 0 elsewhere; every other rank is far below any cheap path.
    n_cheap = (1 + rank).unsqueeze(2)  # [bs, D, 1] (rank is 0 off the branch depth)
    expensive_top = -(2.0 + abs(CHEAP_FIRST) * depth + CHEAP_STEP * topk)
    jf = j.to(torch.float32)
    log_probs = torch.where(j < n_cheap, CHEAP_FIRST - CHEAP_STEP * jf,
                            expensive_top - EXPENSIVE_STEP * (j - n_cheap).to(torch.float32))
    return log_probs.contiguous(), ids.contiguous(), plan


class ReplayTable:
    """Continuations from reference sequences: (position p, token s[p]) -> s[p + 1 .. p + D] of the first
    sequence holding that pair (later duplicates are dropped); past a sequence's end, and for pairs off
    every sequence, an arbitrary continuation (root + 1, root + 2, ... mod vocab).

    Shape: ``sequences`` lists of token ids (prompt + output, position = index); ``__call__`` roots [bs],
    positions [bs] -> [bs, depth] int64 on the table's device, without host sync."""

    def __init__(self, sequences: Sequence[Sequence[int]], *, vocab: int, depth: int, device):
        self.vocab, self.depth = int(vocab), int(depth)
        table = {}
        for seq in sequences:
            for p in range(len(seq) - 1):
                key = p * self.vocab + int(seq[p])
                if key not in table:
                    nxt = list(seq[p + 1 : p + 1 + self.depth])
                    table[key] = nxt + [(int(seq[p]) + 1 + j) % self.vocab for j in range(len(nxt), self.depth)]
        keys = sorted(table)
        self.keys = torch.tensor(keys or [-1], dtype=torch.int64, device=device)
        self.conts = torch.tensor([table[k] for k in keys] or [[0] * self.depth], dtype=torch.int64, device=device)

    def __len__(self) -> int:
        return int(self.keys.shape[0]) if int(self.keys[0]) >= 0 else 0

    def __call__(self, roots: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        roots = roots.to(torch.int64)
        q = positions.to(torch.int64) * self.vocab + roots
        idx = torch.searchsorted(self.keys, q).clamp(max=self.keys.shape[0] - 1)
        hit = (self.keys[idx] == q).unsqueeze(1)
        miss = (roots.unsqueeze(1) + 1 + torch.arange(self.depth, device=roots.device)) % self.vocab
        return torch.where(hit, self.conts[idx], miss)


class DraftOracle:
    """The worker-side oracle: ``(roots [bs], positions [bs]) -> (log_probs, ids) [bs, L-1, K]``, around
    a successor map (``successor``) or a ``ReplayTable`` (``replay``: reference sequences), one of the two."""

    def __init__(self, successor: Optional[Sequence[int]] = None, *, seed: int, block_size: int, topk: int,
                 budget: int, max_accept: int, device, replay: Optional[Sequence[Sequence[int]]] = None,
                 vocab: Optional[int] = None):
        if (successor is None) == (replay is None):
            raise ValueError("DraftOracle: give a successor map or replay sequences, one of the two")
        self.seed, self.depth, self.topk = int(seed), int(block_size) - 1, int(topk)
        self.succ = None if successor is None else torch.tensor(list(successor), dtype=torch.int64, device=device)
        self.replay = None if replay is None else ReplayTable(replay, vocab=int(vocab), depth=self.depth,
                                                              device=device)
        self.max_accept = int(max_accept)
        self.max_rank = max_branch_rank(self.topk, int(budget), self.max_accept)

    @classmethod
    def from_json(cls, path: str, **kwargs) -> "DraftOracle":
        """``path``: {"successor": [V ints], "seed": int (default 0)} or
        {"replay": [[token ids], ...], "vocab_size": V, "seed": int}."""
        with open(path) as f:
            spec = json.load(f)
        if not isinstance(spec, dict):
            spec = {}
        if "replay" in spec:
            seqs, vocab = spec["replay"], spec.get("vocab_size")
            ok = (isinstance(vocab, int) and vocab >= 2 and isinstance(seqs, list) and seqs
                  and all(isinstance(q, list) and all(isinstance(t, int) and 0 <= t < vocab for t in q) for q in seqs))
            if not ok:
                raise ValueError(f"DDTREE_TEST_DRAFT_ORACLE={path}: need {{'replay': [[token ids in [0, vocab_size)], "
                                 f"...], 'vocab_size': int >= 2, 'seed': int}}.")
            return cls(seed=int(spec.get("seed", 0)), replay=seqs, vocab=vocab, **kwargs)
        succ = spec.get("successor")
        if not isinstance(succ, list) or len(succ) < 2 or not all(isinstance(t, int) for t in succ):
            raise ValueError(f"DDTREE_TEST_DRAFT_ORACLE={path}: need {{'successor': [V ints], 'seed': int}} "
                             f"or {{'replay': [[ids], ...], 'vocab_size': V, 'seed': int}}.")
        if min(succ) < 0 or max(succ) >= len(succ):
            raise ValueError(f"DDTREE_TEST_DRAFT_ORACLE={path}: successor ids must lie in [0, {len(succ)}).")
        return cls(succ, seed=int(spec.get("seed", 0)), **kwargs)

    @property
    def vocab_size(self) -> int:
        return int(self.succ.shape[0]) if self.succ is not None else self.replay.vocab

    def describe(self) -> str:
        branch = f"branch ranks 1..{self.max_rank}" if self.max_rank else "no branching (budget < 2 * depth)"
        source = "successor map" if self.succ is not None else f"replay of {len(self.replay)} (position, token) pairs"
        return f"{source}, vocab {self.vocab_size}, seed {self.seed}, cut 0..{self.max_accept}, {branch}"

    def __call__(self, roots: torch.Tensor, positions: torch.Tensor):
        """Shape: roots [bs] int (bonus tokens), positions [bs] int (the committed lengths = the roots'
        positions). Returns new tensors (the drafter's static CUDA-graph buffers stay untouched)."""
        roots, positions = roots.reshape(-1), positions.reshape(-1)
        if self.succ is not None:
            cont = true_continuation(roots, self.succ, self.depth)
        else:
            cont = self.replay(roots, positions)
        log_probs, ids, _ = planned_topk(roots, positions, cont, self.vocab_size, topk=self.topk, seed=self.seed,
                                         max_accept=self.max_accept, max_rank=self.max_rank)
        return log_probs, ids


def replay_rounds(output_ids: Sequence[int], prompt_len: int, max_new_tokens: int, *, seed: int,
                  max_accept: int, max_rank: int) -> List[tuple]:
    """Host mirror of a greedy DDTREE request under the oracle (for tests): the plan of every round
    the scheduler counts. Round k's root is output token i_k (i_0 = 0, the prefill's token) at position
    prompt_len + i_k; it commits cut + 1 tokens, so i_{k+1} = i_k + cut + 1; rounds run while
    i_k + 1 < max_new_tokens. Returns [(cut, branch_depth, branch_rank)] per round."""
    rounds, i = [], 0
    while i + 1 < max_new_tokens:
        assert i < len(output_ids), (i, len(output_ids))
        plan = oracle_plan(torch.tensor([output_ids[i]]), torch.tensor([prompt_len + i]), seed=seed,
                           max_accept=max_accept, max_rank=max_rank)
        cut = int(plan.cut[0])
        rounds.append((cut, int(plan.branch_depth[0]), int(plan.branch_rank[0])))
        i += cut + 1
    return rounds


def load_draft_oracle(path: str, geometry, *, vocab_size: int, device) -> DraftOracle:
    """The worker's oracle for DDTREE_TEST_DRAFT_ORACLE=``path`` (built once per worker, by the hook).
    ``geometry``: the worker's round config (budget, topk, block_size, max_depth)."""
    oracle = DraftOracle.from_json(path, block_size=geometry.block_size, topk=geometry.topk,
                                   budget=geometry.budget, max_accept=geometry.max_depth, device=device)
    if oracle.vocab_size > int(vocab_size):
        raise ValueError(f"DDTREE_TEST_DRAFT_ORACLE={path}: the oracle's table covers {oracle.vocab_size} "
                         f"tokens, the target's vocabulary only {vocab_size}.")
    if geometry.topk >= oracle.vocab_size:
        raise ValueError(f"DDTREE_TEST_DRAFT_ORACLE={path}: topk {geometry.topk} >= vocab {oracle.vocab_size}.")
    logger.warning("!!! DDTREE TEST DRAFT ORACLE ACTIVE (DDTREE_TEST_DRAFT_ORACLE=%s): the drafter's top-K "
                   "is REPLACED by a plan built from a known continuation (%s). For tests only: unset it "
                   "for real serving. !!!", path, oracle.describe())
    return oracle
