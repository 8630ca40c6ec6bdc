"""ACCEPT step of a DDTree round: the target's greedy tokens, or target-only tree sampling at T > 0.

Greedy batches: ``greedy_targets`` gives the target's token at every node (penalties and logit bias
applied first, as ``eagle_sample`` does); the walk itself runs fused with the commit
(``kv_commit.greedy_accept_commit``). At T > 0 the walk is
upstream's ``tree_speculative_sampling_target_only`` kernel: at each node it draws from the target's
(filtered) distribution at that node; a child whose token is drawn is accepted, else the drawn token
is the bonus token. With the draft distribution set to zero this samples every new token from the
target's distribution exactly, whatever the tree holds - provided the distribution it is given is the
one plain decoding samples from. That is why this module exists:

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

from typing import Tuple

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


def sample_tree(verify_input, batch, logits_output) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Target-only tree sampling (T > 0). Shape: -> (predict [bs*N] int32: the token after each
    accepted node, accept_lens [bs] int32: accepted nodes INCLUDING the root, 1..D+1 (the number of
    tokens the round emits, ``eagle_sample``'s convention), accept_index [bs, D + 1] int32: flattened
    rows b * N + row, -1 padded)."""
    from sgl_kernel import tree_speculative_sampling_target_only

    from sglang.srt.runtime_context import get_server_args

    info = batch.sampling_info
    bs, n = len(batch.seq_lens), verify_input.draft_token_num
    device = batch.device
    logits = _verify_logits(verify_input, batch, logits_output)
    probs = joint_filtered_probs(
        logits,
        torch.repeat_interleave(info.temperatures, n, dim=0),
        torch.repeat_interleave(info.top_ps, n, dim=0) if info.need_top_p_sampling else None,
        torch.repeat_interleave(info.top_ks, n, dim=0) if info.need_top_k_sampling else None,
    ).view(bs, n, -1)
    predict = torch.zeros(bs * n, dtype=torch.int32, device=device)
    accept_index = torch.full((bs, verify_input.max_tree_depth), -1, dtype=torch.int32, device=device)
    num_drafts = torch.empty(bs, dtype=torch.int32, device=device)  # accepted draft nodes, root excluded
    server_args = get_server_args()
    tree_speculative_sampling_target_only(
        predicts=predict,
        accept_index=accept_index,
        accept_token_num=num_drafts,
        candidates=verify_input.draft_token.view(bs, n),
        retrive_index=verify_input.retrieve_index,
        retrive_next_token=verify_input.retrieve_next_token,
        retrive_next_sibling=verify_input.retrieve_next_sibling,
        uniform_samples=torch.rand((bs, n), dtype=torch.float32, device=device),
        uniform_samples_for_final_sampling=torch.rand((bs,), dtype=torch.float32, device=device),
        target_probs=probs,
        draft_probs=torch.zeros_like(probs),
        threshold_single=server_args.speculative_accept_threshold_single,
        threshold_acc=server_args.speculative_accept_threshold_acc,
        deterministic=True,
    )
    tp_group = get_tp_group()
    if tp_group.world_size > 1:  # ranks may round the filtered probs differently: rank 0 decides
        tp_group.broadcast(predict, src=0)
        tp_group.broadcast(accept_index, src=0)
        tp_group.broadcast(num_drafts, src=0)
    # The kernel counts accepted drafts; the round commits them plus the root (f8fc813 returned the
    # bare count, so every T > 0 round committed one token too few and the scheduler died).
    return predict, num_drafts + 1, accept_index
