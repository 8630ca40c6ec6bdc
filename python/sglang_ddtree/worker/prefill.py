"""DDTREE's prefill without the host wait, on the SGLang 0.5.16 family (EXPERIMENTAL, off by default; session 44).

Upstream DFLASH's prefill (0.5.16: the extend branch of ``DFlashWorkerV2.forward_batch_generation``, which DDTREE
reaches through ``super()``) turns the batch's extend and prefix lengths, Python lists, into device tensors with
``torch.tensor(..., device=cuda)``: a blocking copy from pageable memory, so the scheduler's thread waits there
until the GPU has run everything queued before it (the target's prefill, its sampling, any tail of the previous
decode round), once per prefill iteration. SGLang 0.5.23 enqueues the same copies (its ``async_h2d``). A read of
session 43's engine logs put a prefill batch at ~6 ms of a tiny-pair engine's time (session 44, ``prefill_gaps``);
this wait is one part of it, not yet measured alone.

``SGLANG_DDTREE_PREFILL_ASYNC=1`` runs ``prefill`` here instead, where the compat adapter says upstream's prefill
is the 0.5.16 one (``own_prefill``): the same steps in the same order, the two lengths copied from pinned host
memory without a wait (PyTorch's caching host allocator keeps a pinned block until the copy from it has run).
0 / unset: upstream's prefill. To be made the default once greedy parity and a paired A/B ran with it on a GPU.

Where every request of the batch extends by one token (the radix cache held its prompt but the last token: how a
speculative engine's successors are mostly admitted, one at a time, session 45), the drafter's context is one row
per request, which the width-0 round's draft-KV graphs append in one replay (``draft_kv_graph.append_root``);
sessions 47-48 timed upstream's eager append at 0.42-0.59 ms per prefill iteration, the graphs' at 0.09-0.13 ms a
round (``+split``). Not yet run on a GPU.

GPU record: sharp greedy parity exact with it on triton (session 46: b64) and on fa3 with the 1-token prefill
graphs (session 48: auto's bucket cycle with every prefill 1 token, b15 without overlap), all before the draft-KV
graphs took the 1-token prefills; paired speed within the noise (session 46: 1.029x over 2 repetitions, triton;
session 48: 0.987x in 1, fa3).
"""

from __future__ import annotations

from typing import Sequence

import torch

from sglang_ddtree.compat import adapter
from sglang_ddtree.config import env_switch

ENV = "SGLANG_DDTREE_PREFILL_ASYNC"


def enabled(error=ValueError) -> bool:
    """Whether this process's DDTREE worker runs ``prefill`` (``ENV`` on and the adapter's ``own_prefill``); a
    value other than 0 / 1 raises ``error`` in one line (validation reads it first, so a server stops at start)."""
    on = env_switch(ENV, on="DDTREE's prefill without the host wait (0.5.16 family)", off="upstream's prefill",
                    error=error)
    return on and adapter().own_prefill


def lens_to_device(values: Sequence[int], device) -> torch.Tensor:
    """int32 [len(values)] on ``device`` from a list, enqueued without a host wait on CUDA (pinned, non-blocking)."""
    host = torch.tensor(values, dtype=torch.int32, pin_memory=torch.device(device).type == "cuda")
    return host.to(device, non_blocking=True)


def prefill(worker, batch, on_publish=None):
    """The prefill iteration of ``worker`` (a DDTreeWorker): the target's prefill capturing the drafter's hidden
    states, the prompt's tokens written into the draft KV, the draft state for the first round."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, compute_position

    worker._validate_phase1_sampling_support(batch)
    out = worker.target_worker.forward_batch_generation(batch, capture_hidden_mode=CaptureHiddenMode.FULL)
    out.new_seq_lens = batch.seq_lens
    if on_publish is not None:
        on_publish(out.new_seq_lens)
    logits = out.logits_output
    if logits.hidden_states is None:
        raise RuntimeError("DDTREE prefill: the target captured no hidden states for the drafter (its DFlash "
                           "layers to capture are not configured).")
    if batch.extend_lens is None or batch.prefix_lens is None or batch.out_cache_loc is None:
        raise RuntimeError("DDTREE prefill: the extend batch has no extend_lens / prefix_lens / out_cache_loc.")
    device = out.next_token_ids.device
    num_tokens = int(sum(batch.extend_lens))
    positions, _ = compute_position(worker.model_runner.server_args.attention_backend,
                                    lens_to_device(batch.prefix_lens, device),
                                    lens_to_device(batch.extend_lens, device), num_tokens)
    # now, as upstream does: the scheduler may update the radix cache once the prefill returns
    graphs = worker._draft_kv_graphs
    if graphs is not None and num_tokens == len(batch.extend_lens):
        # every request extends by 1 token (each extends by >= 1): one context row per request, what a width-0
        # round appends, replayed from the same graphs (draft_kv_graph.append_root, every commit length 1)
        graphs.append_root(logits.hidden_states, batch.out_cache_loc, positions, None)
    else:
        worker._append_target_hidden_to_draft_kv_by_loc(target_hidden=logits.hidden_states,
                                                        cache_loc=batch.out_cache_loc, positions=positions)
    logits.hidden_states = None  # no copy of the prompt's hidden states to the host under the overlap scheduler
    out.next_draft_input = worker._make_next_draft_input_prefill(bonus_tokens=out.next_token_ids,
                                                                 seq_lens=batch.seq_lens)
    return out
