"""Commit the accepted path (COMMIT step of the round): target KV moves and the drafter's new context.

The verify forward wrote node j of request b at slot ``verify_loc[b, j]`` (= req_to_token[b, prefix + j]).
The accepted path (root, then one node per depth) must end up at slots prefix + 0 .. prefix + a - 1,
i.e. at ``verify_loc[b, d]`` for depth d. Every slot here comes from the verify's own out_cache_loc,
never from a post-verify read of req_to_token: with DFLASH-family CUDA graphs the target publishes
"read done" before replay, after which the scheduler may already rewrite req_to_token rows
(DESIGN.md hazard). Unused entries point at slot 0, SGLang's dummy slot for padded writes.
"""

from __future__ import annotations

from typing import Tuple

import torch


def accepted_kv_moves(
    verify_loc: torch.Tensor, accept_index: torch.Tensor, accept_lens: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Slot pairs for ``KVCache.move_kv_cache(tgt, src)``.

    Shape: verify_loc [bs, N] int64; accept_index [bs, W] int32/int64, global node index b * N + row
    per depth, -1 padded; accept_lens [bs] int, accepted nodes incl. the root (1..W).
    Returns (tgt [bs*W] int64, src [bs*W] int64); entries at depth >= accept_len are (0, 0).
    Request b's entries are contiguous and ordered by depth; a source node's depth-slot is never
    smaller than its depth, so a move never reads a slot an earlier entry of the same request wrote.
    """
    bs, width = accept_index.shape
    live = torch.arange(width, device=verify_loc.device).unsqueeze(0) < accept_lens.view(bs, 1)
    src = verify_loc.reshape(-1)[accept_index.to(torch.int64).clamp(min=0)]
    tgt = verify_loc[:, :width]
    zero = torch.zeros((), dtype=torch.int64, device=verify_loc.device)
    return torch.where(live, tgt, zero).reshape(-1), torch.where(live, src, zero).reshape(-1)


def accepted_path_context(
    hidden: torch.Tensor,
    verify_loc: torch.Tensor,
    accept_index: torch.Tensor,
    prefix_lens: torch.Tensor,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The drafter's new context: the accepted path's target hidden states at their final slots.

    Shape: hidden [bs*N, Hc] (target aux hidden states of every verified node), verify_loc [bs, N],
    accept_index [bs, W] (-1 padded), prefix_lens [bs].
    Returns (ctx_hidden [bs*W, Hc], cache_loc [bs*W] int64, cache_loc_2d [bs, W] int64 contiguous,
    positions [bs*W] int64). Rows at depth >= accept_len are garbage; the draft KV writer commits only
    the first accept_len rows of each request.
    """
    bs, width = accept_index.shape
    ctx_hidden = hidden[accept_index.to(torch.int64).clamp(min=0).reshape(-1)]
    cache_loc_2d = verify_loc[:, :width].contiguous()
    depth = torch.arange(width, device=verify_loc.device, dtype=torch.int64)
    positions = (prefix_lens.to(torch.int64).view(bs, 1) + depth.view(1, width)).reshape(-1)
    return ctx_hidden, cache_loc_2d.reshape(-1), cache_loc_2d, positions


def gather_accepted_tokens(
    predict: torch.Tensor, accept_index: torch.Tensor, accept_lens: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Emitted tokens and the next bonus token.

    Shape: predict [bs*N] int (eagle_sample: the target's token after each accepted node),
    accept_index [bs, W], accept_lens [bs] (1..W).
    Returns (tokens [bs, W] int64: the first accept_len are this round's new tokens, the last of
    them the bonus; bonus [bs] int64).
    """
    tokens = predict.to(torch.int64)[accept_index.to(torch.int64).clamp(min=0)]
    bonus = tokens.gather(1, (accept_lens.to(torch.int64) - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    return tokens, bonus
