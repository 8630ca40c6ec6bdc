"""Plain-Python oracles for the worker's CPU tests (one request at a time, no batching tricks)."""

from __future__ import annotations

import itertools

import torch


def best_prefixes(log_probs: torch.Tensor, token_ids: torch.Tensor, budget: int):
    """All prefixes of rank paths up to depth L-1, the ``budget`` best by score.

    Shape: log_probs [L-1, K], token_ids [L-1, K]. Returns a set of token-id tuples (root excluded).
    Exhaustive: keep L-1 and K small."""
    depth_max, k = log_probs.shape
    scored = []
    for d in range(1, depth_max + 1):
        for ranks in itertools.product(range(k), repeat=d):
            score = sum(float(log_probs[i, r]) for i, r in enumerate(ranks))
            scored.append((score, tuple(int(token_ids[i, r]) for i, r in enumerate(ranks))))
    scored.sort(key=lambda x: -x[0])
    return {path for _, path in scored[:budget]}


def tree_paths(token_ids, parents, valid):
    """Token paths (root excluded) of every valid non-root row of one request's tree."""
    paths = set()
    for row in range(1, len(parents)):
        if not bool(valid[row]):
            continue
        path, cur = [], row
        while cur > 0:
            path.append(int(token_ids[cur]))
            cur = int(parents[cur])
        paths.add(tuple(reversed(path)))
    return paths


def verify_tree_greedy(candidates, r_index, r_next, r_sibling, target_predict, width):
    """Re-statement of sgl_kernel.verify_tree_greedy. Shapes: [bs, N] each; returns
    (predicts [bs*N], accept_index [bs, width], num_correct_drafts [bs])."""
    bs, n = candidates.shape
    predicts = torch.zeros(bs * n, dtype=torch.int64)
    accept_index = torch.full((bs, width), -1, dtype=torch.int64)
    num = torch.zeros(bs, dtype=torch.int64)
    for b in range(bs):
        last, count = 0, 0
        accept_index[b, 0] = r_index[b, 0]
        for _ in range(1, width):
            cur = int(r_next[b, last])
            while cur != -1:
                if int(candidates[b, cur]) == int(target_predict[b, last]):
                    predicts[int(r_index[b, last])] = target_predict[b, last]
                    count += 1
                    accept_index[b, count] = r_index[b, cur]
                    last = cur
                    break
                cur = int(r_sibling[b, cur])
            if cur == -1:
                break
        num[b] = count
        predicts[int(r_index[b, last])] = target_predict[b, last]
    return predicts, accept_index, num


def accept_walk(token_ids, parents, valid, target_next):
    """Longest path from the root whose tokens the target predicts; returns (rows, bonus)."""
    rows, cur = [0], 0
    while True:
        want = int(target_next[cur])
        nxt = [r for r in range(1, len(parents)) if bool(valid[r]) and int(parents[r]) == cur
               and int(token_ids[r]) == want]
        if not nxt:
            return rows, want
        cur = nxt[0]
        rows.append(cur)
