"""DDTREE_TEST_FLOOR_ROUND=1: every decode round of a budget-auto engine replaced by the least a width-0 round can do
(a diagnostic, the tests' plugin only; AROUND hook on ``DDTreeWorker._decode_round``).

Why: a width-0 round (no drafting) ran at ~0.52x plain decoding's speed on the tiny pair at bs 16; session 34's sync
watch showed the scheduler's main thread busy for the whole ~2.1 ms iteration against AR's ~1.1 ms. Part of that is
the round's own work past the verify (the commit launch, the draft-KV append, AutoWidth's bookkeeping, ...), part is
upstream's speculative (spec-v2) scheduler path, which every DDTREE and DFLASH round pays. This round keeps only what
a width-0 round cannot drop: the root's KV slot, the width-0 verify forward exactly as the real round runs it (the
width-0 bucket's backend and CUDA graphs), the argmax and the result the scheduler needs. It does NOT write the
drafter's KV, so the engine must never draft again: every round is a width-0 round (AutoWidth is not consulted).
Its greedy output is still plain decoding's (the target's argmax at each step). Its period against AR's and against
the real width-0 round's (``+syncwatch``) splits the gap into the round's own cost and the spec-v2 path's floor.

Refuses (RuntimeError at the first round) an engine without budget auto, a hybrid target, or a batch that is not all
greedy.
"""

from __future__ import annotations

import torch

_BANNER = "DDTREE TEST FLOOR ROUND ACTIVE: no drafting, the drafter's KV is not kept"


def floor_round(original, worker, batch, on_publish):
    """AROUND ``DDTreeWorker._decode_round(batch, on_publish)``: the minimal width-0 round (module docstring)."""
    from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs_func
    from sglang.srt.managers.scheduler import GenerationBatchResult
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode

    from sglang_ddtree.worker.info import DDTreeVerifyInput, make_draft_input

    if getattr(worker, "_widths", None) is None:
        raise RuntimeError("DDTREE_TEST_FLOOR_ROUND needs --speculative-ddtree-budget auto (the width-0 bucket's "
                           "verify backend and graphs).")
    if not batch.sampling_info.is_all_greedy:
        raise RuntimeError("DDTREE_TEST_FLOOR_ROUND serves greedy batches only.")
    if getattr(worker, "_hybrid", False):
        raise RuntimeError("DDTREE_TEST_FLOOR_ROUND does not commit a hybrid target's recurrent state.")
    if not worker.__dict__.get("_ddtree_test_floor_said"):
        import logging

        logging.getLogger(__name__).warning("!!! %s !!!", _BANNER)
        worker._ddtree_test_floor_said = True
    cfg = worker.config
    draft_input = batch.spec_info
    if batch.seq_lens.is_cuda:  # as the real round: the lengths come from the scheduler's stream
        batch.seq_lens.record_stream(torch.cuda.current_stream(batch.seq_lens.device))
    bs = len(batch.seq_lens)
    prefix = batch.seq_lens
    verify_loc = assign_extend_cache_locs_func(
        req_pool_indices=batch.req_pool_indices, req_to_token=worker.model_runner.req_to_token_pool.req_to_token,
        start_offset=prefix, end_offset=prefix + 1, batch_size=bs, draft_token_num=1, device=worker.device,
    )
    host = worker._host_seq_lens(batch, draft_input)
    verify_cpu, verify_sum = host.plus(1)
    chains = worker._chain_inputs()
    causal = cfg.verifies_causally(0)
    r_index, r_next, r_sibling = (None, None, None) if causal else chains.links(bs, 1)
    with worker._widths.active(0):
        verify_input = DDTreeVerifyInput(
            draft_token=draft_input.bonus_tokens.view(-1), positions=chains.positions(prefix, 1), draft_token_num=1,
            topk=cfg.topk, custom_mask=None if causal else chains.root_mask(bs, host.mask_sum_bound),
            capture_hidden_mode=CaptureHiddenMode.FULL, retrieve_index=r_index, retrieve_next_token=r_next,
            retrieve_next_sibling=r_sibling, max_depth=cfg.max_depth, tree_bits=None,
        )
        logits_output, verify_fb, can_run_cuda_graph = worker._verify(batch, verify_input, verify_loc, verify_cpu,
                                                                      verify_sum)
    bonus = torch.argmax(logits_output.next_token_logits, dim=-1)  # [bs] int64
    width = cfg.accept_width
    out_tokens = torch.nn.functional.pad(bonus.view(bs, 1), (0, width - 1))  # [bs, W], the first column valid
    accept_lens = torch.ones(bs, dtype=torch.int32, device=prefix.device)
    new_seq_lens = prefix + 1
    if on_publish is not None:
        on_publish(new_seq_lens)
    logits_output.hidden_states = None
    return GenerationBatchResult(
        logits_output=logits_output, next_token_ids=out_tokens.view(-1), accept_lens=accept_lens,
        can_run_cuda_graph=can_run_cuda_graph, next_draft_input=make_draft_input(bonus, new_seq_lens),
        speculative_num_draft_tokens=width, new_seq_lens=new_seq_lens,
        extra_keep_alive_refs=[verify_fb, verify_input, verify_loc],
    )
