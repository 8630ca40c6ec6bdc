"""The test hooks themselves (AFTER hooks of ``HookRegistry``: ``fn(result, *args, **kwargs)``).

Each reads its settings from ``configure``'s ``HookEnv``; none runs unless ``register`` installed it.
  after_draft_oracle            DRAFT: (log_probs, ids) := the oracle's plan for (roots, root positions);
                                the oracle is built once per worker, on its first round, and cached on it
  after_draft_reverse_ranks     DRAFT: ids := ids.flip(-1) (the tree favours the drafter's worst ranks)
  after_verify_topology_corrupt BUILD: the FULL_MASK's tree part rewritten (``verify_check.corrupt_full_mask``)
  after_verify_topology_reverse_siblings  BUILD: retrieve links with children highest row first (hybrid fault)
  after_last_accepted_rows_chain          COMMIT: the hybrid commit row := accept_len - 1 (hybrid fault)
  after_verify_dump             VERIFY: the first rounds' trees and logits saved (``verify_check`` reads them);
                                copies to the host, i.e. syncs: tests only
  after_choose_pin              WIDTH: every round at DDTREE_TEST_PIN_BUDGET (a bucket of the server's budget auto)
  after_warm_compile_baseline   START-UP: the round kernels' compiled specialisations after the warm-up
                                (``compile_watch``), one JSON line to DDTREE_TEST_COMPILE_LOG
  after_round_compile_check     ROUND: a JSON line for every round after which that count grew
"""

from __future__ import annotations

import logging
import os

import torch

from ddtree_test_hooks import verify_check
from sglang_ddtree.config import is_chain

logger = logging.getLogger(__name__)

_ENV = None
_STATE = {"dumped": 0, "corrupted": 0, "rounds": 0, "compiled": None}
ORACLE_BANNER = "DDTREE TEST DRAFT ORACLE ACTIVE"
DUMP_FORMAT = 1


def configure(env) -> None:
    global _ENV
    _ENV = env
    _STATE.update(dumped=0, corrupted=0, rounds=0, compiled=None)


def _arg(args, kwargs, index: int, name: str):
    """Argument ``name`` of the hooked method (after ``self``), passed by position or keyword."""
    return kwargs[name] if name in kwargs else args[index]


def round_config(worker):
    """The worker's frozen round config: ``worker.config`` (a ``DDTreeConfig``) or, in older trees,
    ``worker.geometry``; anything with budget, topk, block_size and max_depth."""
    for name in ("config", "geometry"):
        obj = getattr(worker, name, None)
        if obj is not None and all(hasattr(obj, f) for f in ("budget", "topk", "block_size", "max_depth")):
            return obj
    raise RuntimeError("DDTREE test hooks: the worker has neither .config nor .geometry with "
                       "budget / topk / block_size / max_depth")


# ---- DRAFT ---------------------------------------------------------------------------------------
def _worker_oracle(worker):
    oracle = worker.__dict__.get("_ddtree_test_oracle")
    if oracle is None:
        from ddtree_test_hooks.draft_oracle import load_draft_oracle

        oracle = load_draft_oracle(_ENV.draft_oracle, round_config(worker), device=worker.device,
                                   vocab_size=worker.target_worker.model_runner.model_config.vocab_size)
        worker._ddtree_test_oracle = oracle
    return oracle


def after_draft_oracle(result, worker, *args, **kwargs):
    """Shape: result (log_probs, ids) [bs, L-1, K]; returns the oracle's [bs, L-1, K] pair for the roots
    (``draft_input.bonus_tokens`` [bs]) at their positions (``batch.seq_lens`` [bs]). Eager, no sync."""
    batch, draft_input = _arg(args, kwargs, 0, "batch"), _arg(args, kwargs, 1, "draft_input")
    return _worker_oracle(worker)(draft_input.bonus_tokens, batch.seq_lens)


def after_draft_reverse_ranks(result, worker, *args, **kwargs):
    log_probs, token_ids = result
    return log_probs, token_ids.flip(-1)


# ---- BUILD (verify topology) ---------------------------------------------------------------------
def after_verify_topology_corrupt(result, tree, prefix_lens, *args, **kwargs):
    """result = (custom_mask, positions, r_index, r_next, r_sibling); the mask's tree part is rewritten."""
    mask, *rest = result
    _STATE["corrupted"] += 1
    return (verify_check.corrupt_full_mask(mask, prefix_lens, tree.token_ids.shape[1], _ENV.corrupt_mask),
            *rest)


# ---- WIDTH (budget auto) ------------------------------------------------------------------------------
def cycle_order(budgets) -> list:
    """The buckets alternating small / large, so consecutive rounds always change width: (0, 1, 3, 7, 15) ->
    [0, 15, 1, 7, 3]."""
    b, out = sorted(budgets), []
    while b:
        out.append(b.pop(0))
        if b:
            out.append(b.pop())
    return out


def after_choose_cycle(result, auto, *args, **kwargs):
    """The next bucket of ``cycle_order`` (per process), whatever the policy chose."""
    order = cycle_order(auto.budgets)
    _STATE["cycled"] = _STATE.get("cycled", -1) + 1
    return order[_STATE["cycled"] % len(order)]
def after_choose_pin(result, auto, *args, **kwargs):
    """DDTREE_TEST_PIN_BUDGET, whatever the policy chose; a value that is not one of the server's buckets fails
    the round (and with it the test) rather than verifying a width with no graphs."""
    if _ENV.pin_budget not in auto.budgets:
        raise ValueError(f"DDTREE_TEST_PIN_BUDGET={_ENV.pin_budget}: not a bucket of this server ({auto.budgets}).")
    return _ENV.pin_budget


def after_verify_topology_reverse_siblings(result, tree, prefix_lens, *args, **kwargs):
    """result = (custom_mask, positions, r_index, r_next, r_sibling); the links get the children of every node
    in descending row order (``verify_check.reversed_sibling_links``). Acceptance reads ``tree.parents``, the
    mask is unchanged: only the hybrid conv kernel's parent derivation sees the fault."""
    mask, positions, r_index, _, _ = result
    r_next, r_sibling = verify_check.reversed_sibling_links(tree.parents)
    return mask, positions, r_index, r_next, r_sibling


# ---- COMMIT (hybrid) -----------------------------------------------------------------------------
def after_last_accepted_rows_chain(result, ctx_rows, accept_lens, *args, **kwargs):
    """DFLASH's chain rule instead of the accepted node's row: [bs] int64 accept_len - 1."""
    return accept_lens.to(torch.int64) - 1


# ---- VERIFY --------------------------------------------------------------------------------------
def after_verify_dump(result, worker, *args, **kwargs):
    """Save round k < DDTREE_TEST_VERIFY_DUMP_ROUNDS to ``<dir>/round_<k>.pt`` (tp rank 0 only)."""
    if _STATE["dumped"] >= _ENV.verify_dump_rounds or getattr(getattr(worker, "ps", None), "tp_rank", 0) != 0:
        return None
    batch, verify_input = _arg(args, kwargs, 0, "batch"), _arg(args, kwargs, 1, "verify_input")
    logits_output, _, can_run_cuda_graph = result
    n = int(verify_input.draft_token_num)
    bs = verify_input.draft_token.numel() // n
    rids = [req.rid for req in batch.reqs]
    assert len(rids) == bs, (len(rids), bs)
    logits = logits_output.next_token_logits[: bs * n].detach().float()
    as_bf16 = logits.to(torch.bfloat16)
    if torch.equal(as_bf16.float(), logits):  # bf16 LM heads: lossless at half the size
        logits = as_bf16
    rec = dict(
        format=DUMP_FORMAT, round=_STATE["dumped"], rids=rids, n=n,
        prefix_lens=batch.seq_lens[:bs].to("cpu", torch.int64),  # [bs]
        tokens=verify_input.draft_token.view(bs, n).to("cpu", torch.int64),  # [bs, N] root first
        positions=verify_input.positions.view(bs, n).to("cpu", torch.int64),  # [bs, N]
        next_token=verify_input.retrieve_next_token.view(bs, n).to("cpu", torch.int64),  # [bs, N] -1 none
        next_sibling=verify_input.retrieve_next_sibling.view(bs, n).to("cpu", torch.int64),
        logits=logits.view(bs, n, -1).cpu(),  # [bs, N, V] bf16 (exact) or float32
        cuda_graph=bool(can_run_cuda_graph), corrupted_rounds=_STATE["corrupted"],
        attention_backend=str(getattr(getattr(worker, "server_args", None), "attention_backend", None)),
    )
    os.makedirs(_ENV.verify_dump, exist_ok=True)
    path = os.path.join(_ENV.verify_dump, f"round_{_STATE['dumped']:03d}.pt")
    torch.save(rec, path + ".tmp")
    os.replace(path + ".tmp", path)
    _STATE["dumped"] += 1
    if _STATE["dumped"] == 1:
        logger.warning("!!! DDTREE TEST VERIFY DUMP ACTIVE: saving %d rounds to %s !!!",
                       _ENV.verify_dump_rounds, _ENV.verify_dump)
    return None


# ---- START-UP and ROUND: Triton compiles of the round's eager kernels ---------------------------------------
def _compile_line(event: dict) -> None:
    import json

    from sglang.srt.distributed import get_tp_group

    with open(_ENV.compile_log, "a") as f:
        f.write(json.dumps({**event, "rank": get_tp_group().rank_in_group, "pid": os.getpid()}) + "\n")


def after_warm_compile_baseline(result, worker, *args, **kwargs):
    """After ``DDTreeWorker._warm_round_kernels``: the counts every later round is compared with."""
    from ddtree_test_hooks import compile_watch

    _STATE["compiled"] = compile_watch.counts()
    buckets = [str(b) if is_chain(b) else b for b in worker.config.buckets]  # json would write chain15 as 15
    _compile_line({"event": "warmed", "counts": _STATE["compiled"], "buckets": buckets})
    return None


def after_round_compile_check(result, worker, *args, **kwargs):
    """After ``DDTreeWorker._decode_round``: a line when the round compiled another specialisation."""
    from ddtree_test_hooks import compile_watch

    _STATE["rounds"] += 1
    if _STATE["compiled"] is None:  # no warm-up ran (it failed, or another worker): the first round is the base
        _STATE["compiled"] = compile_watch.counts()
        _compile_line({"event": "no_warm_up", "round": _STATE["rounds"], "counts": _STATE["compiled"]})
        return None
    now = compile_watch.counts()
    if now != _STATE["compiled"]:
        batch = _arg(args, kwargs, 0, "batch")
        _compile_line({"event": "compiled", "round": _STATE["rounds"], "bs": int(len(batch.seq_lens)),
                       "grew": compile_watch.grown(_STATE["compiled"], now)})
        _STATE["compiled"] = now
    return None
