"""ACCEPT step of a DDTree round: the target's greedy tokens, or target-only tree sampling at T > 0.

Both give the target's token at every node, and the walk runs fused with the commit
(``kv_commit.greedy_accept_commit``) either way. Greedy batches: ``greedy_targets``, the argmax
(penalties and logit bias applied first, as ``eagle_sample`` does). At T > 0: ``node_samples``, one
independent draw per node from the target's filtered distribution at that node; a child whose token is
drawn is accepted, else the draw is the bonus token. That samples every new token from the target's
distribution exactly, whatever the tree holds - provided the distribution it draws from is the one plain
decoding samples from. That is why this module filters as it does:

SGLang's plain samplers (pytorch, and flashinfer with ``filter_apply_order="joint"``) keep a token when
its rank is below top_k AND the mass before it in the FULL softmax is within top_p, then renormalise.
``eagle_sample`` applies top-k, renormalises, and applies top-p to the renormalised distribution: a
smaller set whenever top-k cuts mass, so with top_p and top_k together its tokens are not distributed
like plain decoding's (seen on the H200: chi-square p ~ 1e-21 at temperature 0.7, top_p 0.9, top_k 20).
Applying top-p first (on the full softmax) and then top-k gives plain's joint set: both keep a prefix
of the same descending order, so the second filter only shortens the first's prefix to the shorter
of the two.
"""

from __future__ import annotations

import torch

from sglang.srt.distributed import get_tp_group
from sglang.srt.utils.async_probe import sanitize_nan_logits


def greedy_targets(verify_input, batch, logits_output) -> torch.Tensor:
    """The target's token at every node. Shape: -> [bs, N] int64."""
    logits = _verify_logits(verify_input, batch, logits_output)
    return torch.argmax(logits, dim=-1).view(len(batch.seq_lens), verify_input.draft_token_num)


def joint_filtered_probs(logits: torch.Tensor, temperatures: torch.Tensor, top_ps, top_ks) -> torch.Tensor:
    """Plain sampling's distribution: softmax(logits / T), top-p on it, then top-k, renormalised.
    ``top_ps`` / ``top_ks`` are None when no request uses them. Shape: logits [R, V], temperatures
    [R, 1], top_ps [R] float, top_ks [R] int -> [R, V] float32."""
    from sgl_kernel import top_k_renorm_prob, top_p_renorm_prob

    probs = torch.softmax(logits / temperatures, dim=-1)
    if top_ps is not None:
        probs = top_p_renorm_prob(probs, top_ps)
    if top_ks is not None:
        probs = top_k_renorm_prob(probs, top_ks)
    return probs


def _verify_logits(verify_input, batch, logits_output) -> torch.Tensor:
    """The verify logits [bs*N, V], NaN-checked, with the penalties and logit bias plain decoding
    applies, repeated over each request's N rows (what ``eagle_sample`` does before sampling); in place."""
    logits = logits_output.next_token_logits
    sanitize_nan_logits(logits, "verify: target model logits")
    info, n = batch.sampling_info, verify_input.draft_token_num
    if info.acc_additive_penalties is not None:
        logits.add_(torch.repeat_interleave(info.acc_additive_penalties, n, dim=0))
    if info.acc_scaling_penalties is not None:
        from sglang.srt.sampling.penaltylib.repetition_penalty import apply_scaling_penalties

        apply_scaling_penalties(logits, torch.repeat_interleave(info.acc_scaling_penalties, n, dim=0))
    if info.logit_bias is not None:
        logits.add_(torch.repeat_interleave(info.logit_bias, n, dim=0))
    return logits


def node_samples(verify_input, batch, logits_output) -> torch.Tensor:
    """T > 0: one token drawn at every node from plain decoding's filtered distribution at that node,
    each draw independent. Shape: -> [bs, N] int64.

    The ACCEPT walk then runs exactly as in a greedy round (``kv_commit.greedy_accept_commit``) with these
    draws in place of the argmax: from the root, while the draw at the current node equals a child's token,
    move to that child; the first draw that matches no child is the bonus token. Lossless: the draw at a node
    is distributed as the target's next-token distribution given that node's path, independent of how the
    walk reached it, so every emitted token follows plain decoding's distribution whatever the tree holds
    (a child is accepted with the target's probability of its token, as in target-only tree sampling). No
    [bs, N, V] draft-probability tensor (target-only sampling's zeros), no host sync."""
    info = batch.sampling_info
    bs, n = len(batch.seq_lens), verify_input.draft_token_num
    logits = _verify_logits(verify_input, batch, logits_output)
    probs = joint_filtered_probs(
        logits,
        torch.repeat_interleave(info.temperatures, n, dim=0),
        torch.repeat_interleave(info.top_ps, n, dim=0) if info.need_top_p_sampling else None,
        torch.repeat_interleave(info.top_ks, n, dim=0) if info.need_top_k_sampling else None,
    )
    draws = draw_rows(probs).view(bs, n)
    tp_group = get_tp_group()
    if tp_group.world_size > 1:  # ranks may round the filtered probs differently: rank 0 decides
        tp_group.broadcast(draws, src=0)
    return draws


def draw_rows(probs: torch.Tensor, *, backend: str = "auto") -> torch.Tensor:
    """One independent draw per row of ``probs`` [R, V] float32 (non-negative rows, each drawn from
    p / row sum) -> [R] int64: ``kernels.draw`` (inverse CDF, one uniform per row) on CUDA,
    ``torch.multinomial`` elsewhere. ``backend``: auto | triton | torch (``sglang_ddtree.tree``'s rule)."""
    from sglang_ddtree.tree._common import use_triton

    rows, vocab = probs.shape
    if not use_triton("draw_rows", probs.device, backend):
        return torch.multinomial(probs, num_samples=1).view(-1)
    from sglang_ddtree.worker.kernels.draw import draw_rows_kernel

    probs = probs if probs.stride(1) == 1 else probs.contiguous()
    out = torch.empty(rows, dtype=torch.int64, device=probs.device)
    if rows:
        uniform = torch.rand(rows, dtype=torch.float32, device=probs.device)
        draw_rows_kernel[(rows,)](probs, uniform, out, vocab, probs.stride(0), BLOCK=_DRAW_BLOCK, num_warps=8)
    return out


_DRAW_BLOCK = 4096
