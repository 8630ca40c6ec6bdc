"""Hybrid Mamba/GDN targets (Qwen3.5 / Qwen3.6 / Qwen3-Next): the recurrent state of a tree verify.

Serves VERIFY and COMMIT of the round. What SGLang 0.5.16's hybrid linear-attention backend does with a tree
(``MambaAttnBackendBase`` / ``GDNAttnBackend``, target topk > 1), and what DDTREE therefore feeds it:
  VERIFY (conv)  ``causal_conv1d_update(..., retrieve_next_token, retrieve_next_sibling)`` derives each row's
                 parent in one pass over rows 0..N-1 (``parent[next_token[i]] = i``, then
                 ``parent[next_sibling[i]] = parent[i]``), so it needs parent row < child row and siblings chained
                 in ascending row order: exactly ``tree.topology``'s links (lowest child first, next higher row
                 with the same parent). It convolves each row with its root path, writes the parents to
                 ``retrieve_parent_token`` and each row's last K-1 path inputs to
                 ``intermediate_conv_window[layer, b, row]``.
  VERIFY (SSM)   the GDN recurrence (``fused_sigmoid_gating_delta_rule_update``) starts row i from
                 ``intermediate_ssm[layer, b, parent[i]]`` (row 0 from the committed state) and stores row i's state
                 at ``intermediate_ssm[layer, b, i]``; the committed state is left alone.
  Index          b = the request's position in the batch (the backend's ``verify_intermediate_state_indices`` is
                 an arange), step = the node's row; the kernels take the step stride from the buffers (sized by
                 the configured maximum width), so a round may verify fewer rows N than the configured maximum
                 (eagerly: under CUDA graphs the backend copies the links into buffers of the captured width,
                 so a replayed round's N must be a captured width).
  COMMIT         the state to keep is the one of the last accepted node: row ``ctx_rows[b, accept_len - 1] - b*N``
                 of ``RoundCommit`` (the accepted path's rows by depth), never ``accept_len - 1`` (DFLASH's chain
                 rule). The backend's ``update_mamba_state_after_mtp_verify`` gathers that row into the
                 request's mamba slot; with ``--mamba-scheduler-strategy extra_buffer`` also the node at the
                 radix track point (depth ``track_point - prefix - 1`` of the accepted path) into the track slot.
With topk 1 the tree is one chain in row order and the backend's chain path (no links) gives the same rows.
Argument-time rules and the memory bound: ``sglang_ddtree.hybrid_args``.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

logger = logging.getLogger(__name__)


def last_accepted_rows(ctx_rows: torch.Tensor, accept_lens: torch.Tensor, num_rows: int) -> torch.Tensor:
    """The tree row of each request's last accepted node: the row whose verify state is committed.

    Shape: ctx_rows [bs*W] int64 (``RoundCommit.ctx_rows``: flattened verify row b*N + row of the accepted node
    at each depth), accept_lens [bs] int (1..W), num_rows N of this round's verify -> [bs] int64 in [0, N).
    No host sync.
    """
    bs = accept_lens.shape[0]
    rows = ctx_rows.view(bs, -1)
    last = rows.gather(1, (accept_lens.to(torch.int64) - 1).view(bs, 1)).squeeze(1)
    return last - torch.arange(bs, dtype=torch.int64, device=rows.device) * num_rows


def track_rows(ctx_rows: torch.Tensor, accept_lens: torch.Tensor, prefix_lens: torch.Tensor, num_rows: int,
               interval: int) -> torch.Tensor:
    """For the radix cache's extra_buffer strategy: the row whose state is the one after position
    ``track_point - 1``, where ``track_point`` is the last multiple of ``interval`` the round's commit crosses
    (prefix < track_point <= prefix + accept_len); -1 where the round crosses none.

    Shape: ctx_rows [bs*W] int64, accept_lens [bs] int, prefix_lens [bs] int (the root's position),
    num_rows N -> [bs] int64. Assumes interval >= N (validated), so a round crosses at most one point.
    No host sync.
    """
    bs = accept_lens.shape[0]
    rows = ctx_rows.view(bs, -1)
    prefix = prefix_lens.to(torch.int64)
    post = prefix + accept_lens.to(torch.int64)
    crosses = (prefix // interval) != (post // interval)
    depth = torch.clamp(post // interval * interval - prefix - 1, min=0)
    depth = torch.minimum(depth, accept_lens.to(torch.int64) - 1)
    row = rows.gather(1, depth.view(bs, 1)).squeeze(1) - torch.arange(bs, dtype=torch.int64,
                                                                      device=rows.device) * num_rows
    return torch.where(crosses, row, torch.full_like(row, -1))


class HybridStateCommit:
    """COMMIT of the linear-attention states of a hybrid target (module docstring), once per round.

    Built by the worker when the target is hybrid; ``prepare_verify`` runs before the verify forward batch is
    made (it refreshes the radix track slots as upstream's EAGLE / NGRAM verify do; a host loop over the
    requests, only with the extra_buffer strategy), ``__call__`` after acceptance.
    """

    def __init__(self, target_model_runner, *, track_interval: Optional[int]):
        self.model_runner = target_model_runner
        self.track_interval = track_interval  # None unless the extra_buffer radix strategy is on
        backend = target_model_runner.attn_backend
        if not hasattr(backend, "update_mamba_state_after_mtp_verify"):
            raise ValueError(
                f"DDTREE on a hybrid target needs SGLang's hybrid linear-attention backend, got "
                f"{type(backend).__name__} (no update_mamba_state_after_mtp_verify)."
            )

    @staticmethod
    def prepare_verify(batch) -> None:
        from sglang.srt.speculative.spec_utils import prepare_mamba_track_for_verify

        prepare_mamba_track_for_verify(batch)

    def __call__(self, batch, commit, num_rows: int, prefix_lens: torch.Tensor, verify_backend=None) -> None:
        """Shape: commit a ``kv_commit.RoundCommit``, num_rows N of this round's verify (its
        ``draft_token_num``), prefix_lens [bs] int (the root's position). ``verify_backend``: the attention
        backend that ran this round's verify (budget auto builds one per width, ``widths.VerifyWidths``); its
        forward metadata names the requests' mamba slots, so the commit must go through it, not through the
        runner's own backend, whose metadata is of its last forward at another width (default: the runner's own,
        right for a fixed budget). No host sync."""
        steps = last_accepted_rows(commit.ctx_rows, commit.accept_lens, num_rows)
        track_indices = getattr(batch, "mamba_track_indices", None)
        track_steps = None
        if track_indices is not None and self.track_interval is not None:
            track_steps = track_rows(commit.ctx_rows, commit.accept_lens, prefix_lens, num_rows,
                                     self.track_interval)
        elif track_indices is not None:
            track_indices = None
        backend = self.model_runner.attn_backend if verify_backend is None else verify_backend
        backend.update_mamba_state_after_mtp_verify(
            last_correct_step_indices=steps,
            mamba_track_indices=track_indices,
            mamba_steps_to_track=track_steps,
            model=self.model_runner.model,
        )


def intermediate_state_report(target_model_runner) -> Optional[dict]:
    """Bytes of the per-node verify states the target's mamba pool holds (measured on the allocated buffers):
    {"total": all of them, "per_request": per request slot, "steps": rows per request}; None without them."""
    pool = getattr(getattr(target_model_runner, "req_to_token_pool", None), "mamba_pool", None)
    cache = getattr(pool, "mamba_cache", None)
    ssm = getattr(cache, "intermediate_ssm", None)
    conv = getattr(cache, "intermediate_conv_window", None) or []
    if ssm is None:
        return None
    phys = getattr(pool, "_intermediate_conv_window_phys", None) or conv
    total = ssm.numel() * ssm.element_size() + sum(t.numel() * t.element_size() for t in phys)
    slots = int(ssm.shape[1])
    return {"total": total, "per_request": total // max(slots, 1), "steps": int(ssm.shape[2]), "slots": slots}


def is_hybrid_target(model_config) -> bool:
    """Whether the target carries linear-attention state; for one, the refusal on a release whose hybrid backend
    the commit was not verified against (``hybrid_args.check_release``). The worker's check at start, before
    anything is allocated."""
    from sglang.srt.configs.hybrid_arch import mambaish_config

    from sglang_ddtree import hybrid_args

    if mambaish_config(model_config) is None:
        return False
    hybrid_args.check_release((getattr(model_config.hf_config, "architectures", None) or ["?"])[0])
    return True


def make_hybrid_commit(server_args, target_model_runner, log: bool) -> HybridStateCommit:
    """The commit object of a hybrid target (made at the first round, when the target's backend and mamba pool
    exist), with one log line of the measured per-node state memory."""
    interval = int(server_args.mamba_track_interval) if server_args.enable_mamba_extra_buffer() else None
    commit = HybridStateCommit(target_model_runner, track_interval=interval)
    rep = intermediate_state_report(target_model_runner) if log else None
    if rep is not None:
        logger.info(
            "DDTREE hybrid target: per-node verify states %.1f MiB per request (%d rows), "
            "%.2f GiB for %d request slots.", rep["per_request"] / 2**20, rep["steps"], rep["total"] / 2**30,
            rep["slots"],
        )
    return commit
