"""The DDTREE speculative decoding worker (spec-v2; overlap scheduling on or off).

One decode round, batched over the running requests, without host syncs:
  DRAFT   one DFlash forward over [bonus, mask x (L-1)]; top-K tokens + log-probs of positions
          1..L-1 from the target's LM head (``draft_head``), inside the draft CUDA graph;
  BUILD   the ``budget`` best-scoring prefixes as a tree, on the GPU (``tree_api``); a chain-shaped round (width 0,
          budget auto's chain bucket) takes its constant structure instead (``chain_inputs``);
  VERIFY  budget + 1 tokens per request in one target forward with the ancestor-only mask
          (``DDTreeVerifyInput``; CUDA graphs captured with the mask, see ``hooks``);
  ACCEPT  walk from the root while the target's token at the node (its argmax, or at T > 0 one draw from
          plain decoding's filtered distribution, ``sampling``) is a child's; the first miss is the bonus;
  COMMIT  move the accepted path's target KV into place and write its target hidden states into
          the drafter's KV (``kv_commit``; greedy ACCEPT + COMMIT is one Triton launch, a width-0 round's
          a few PyTorch ops: ``root_commit``, the verify's one row per request appended); on a hybrid
          Mamba/GDN target also the last accepted node's recurrent state (``hybrid``); carry the
          bonus token to the next round.
Prefill, draft-KV materialisation and draft CUDA graphs are DFLASH's (``DFlashWorkerV2``). The
drafter's runner sees block size L and topk 1; the target sees budget + 1 and topk K.
Static shapes come from the one ``DDTreeConfig`` (N = budget + 1 verify tokens per request, D = max
depth, W = D + 1 accept width). Vocabulary (node, root, depth, budget, accepted drafts, accept length =
accepted drafts + bonus token): see ``sglang_ddtree.tree``.
"""

from __future__ import annotations

import contextlib
import logging
import time

import torch

from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs_func
from sglang.kernels.ops.speculative.dflash import _prepare_dflash_draft_block_unchecked
from sglang.srt.distributed import get_tp_group
from sglang.srt.managers.scheduler import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from sglang_ddtree.compat import adapter
from sglang_ddtree.config import DDTreeConfig, chain_shaped, resolved_args
from sglang_ddtree.worker.draft_head import build_draft_head, describe_select
from sglang_ddtree.worker.draft_view import draft_server_args_view
from sglang_ddtree.worker import admission, draft_kv_graph, fa3_tree, head_graph, hybrid, prefill, sampling, warmup
from sglang_ddtree.worker.info import DDTreeDraftInput, DDTreeVerifyInput, make_draft_input
from sglang_ddtree.worker.kv_commit import AcceptedKVMover, greedy_accept_commit, root_commit, root_slots
from sglang_ddtree.worker.chain_inputs import ChainInputs
from sglang_ddtree.worker.tree_api import build_tree, verify_topology

logger = logging.getLogger(__name__)


class DDTreeWorker(DFlashWorkerV2):
    """``DFlashWorkerV2`` with DDTree's decode round (see the module docstring)."""

    def __init__(self, server_args, gpu_id, nccl_port, target_worker, ps=None):
        # The scheduler passes every argument by keyword; ``ps`` (the parallel state) only up to SGLang 0.5.20.
        config = DDTreeConfig.from_server_args(server_args)
        verify_width = resolved_args(server_args).speculative_num_draft_tokens
        if int(verify_width) != config.num_verify_tokens:
            raise RuntimeError(
                f"DDTREE: speculative_num_draft_tokens {verify_width} != budget + 1 "
                f"({config.num_verify_tokens}); the server args were changed after DDTREE validation."
            )
        # Hybrid Mamba/GDN target: on SGLang 0.5.16 only (worker/hybrid.py, hybrid_args.check_release).
        self._hybrid = hybrid.is_hybrid_target(target_worker.model_runner.model_config)
        self._hybrid_commit = None  # hybrid.HybridStateCommit, made at the first round
        self.config = config
        adapter().init_dflash_worker(super().__init__, draft_server_args_view(server_args, config), config,
                                     gpu_id, ps, nccl_port, target_worker)
        self.server_args = server_args
        if self.use_compact_draft_cache:
            raise ValueError("--speculative-draft-window-size is not supported with DDTREE yet.")
        if int(self.block_size) != config.block_size:
            raise RuntimeError(f"DDTREE: draft block size {self.block_size} != configured {config.block_size}.")
        # Eager top-K head (the draft CUDA graph folds in its own copy, see _maybe_build_draft_sampler).
        self._eager_head, reason = self._make_head(max_bs=1)
        if self._eager_head is None:
            raise ValueError(f"--speculative-algorithm DDTREE needs a floating-point target LM head: {reason}.")
        self._warned_host_sync = False
        self._own_prefill = prefill.enabled()  # worker.prefill (experimental), else upstream's prefill
        self._move_kv = None  # AcceptedKVMover, made at the first round (the target's pool exists by then)
        self._fa3_tree_bits = None  # whether rounds write ancestor bits for fa3's fused tree attention (first round)
        self._widths = None  # --speculative-ddtree-budget auto: VerifyWidths + AutoWidth (init_cuda_graphs)
        self._auto = None
        self._draft_kv_graphs = None  # draft_kv_graph.DraftKVAppendGraphs (init_cuda_graphs), else the eager append
        self._chains = None  # ChainInputs of width 0 and the chain bucket (made at the first chain-shaped round)
        self._heads = None  # head_graph.TreeHeads (init_cuda_graphs, where they apply), else the eager head
        if get_tp_group().rank_in_group == 0:
            logger.info(
                "DDTREE worker: budget=%d topk=%d block=%d verify=%d tokens/request, max depth %d, "
                "KV reserve %d/round; draft top-K: %s.",
                config.budget, config.topk, config.block_size, config.num_verify_tokens,
                config.max_depth, config.reserve_per_decode, describe_select(self._eager_head.select),
            )

    # ---- set-up hooks of DFlashWorkerV2 -------------------------------------------------------
    def _make_head(self, max_bs: int):
        tp_group = get_tp_group()
        return build_draft_head(
            self.target_worker.model_runner.model, block_size=self.config.block_size,
            topk=self.config.topk, max_bs=max_bs, tp_group=tp_group if tp_group.world_size > 1 else None,
        )

    def _maybe_build_draft_sampler(self):
        """Fold the top-K head into the draft CUDA graph (tp == 1); None keeps it eager."""
        head, reason = self._make_head(max_bs=max(resolved_args(self.server_args).cuda_graph_config.decode.bs))
        if head is None or head.tp_size > 1:
            if get_tp_group().rank_in_group == 0:
                logger.info("DDTREE draft top-K head kept eager (%s).", reason or "tp > 1")
            return None
        return head

    # The scheduler sets the draft runner up in three calls after construction (pool, attention backends, CUDA
    # graphs). From 0.5.17 upstream's backends read the speculative widths process-wide (``get_spec()``), which
    # holds the target's: each call runs in the drafter's (``drafter_widths``). Unscoped, fa3's draft backend took
    # the target's verify width (16 / 65 rows per request at budget 15 / 64) for the drafter's 8 and the draft
    # graph capture wrote past its buffers (illegal address on the H200, SGLang 0.5.17, session 13).
    def alloc_memory_pool(self, *args, **kwargs):
        with adapter().drafter_widths(self.config):
            out = super().alloc_memory_pool(*args, **kwargs)
        # the admission window's start-up line needs max running requests, which the target's pool (allocated by the
        # scheduler after this worker's __init__, before this call) sets
        if admission.window_passes() and get_tp_group().rank_in_group == 0:
            mr = self.target_worker.model_runner
            logger.log(*admission.start_line(mr.max_running_requests,
                                             getattr(mr.server_args, "min_free_slots_delay", None)))
        return out

    def init_attention_backends(self):
        with adapter().drafter_widths(self.config):
            return super().init_attention_backends()

    def init_cuda_graphs(self):
        """DFLASH's draft graphs (in the drafter's widths, above), then the draft-KV append graphs and, with
        ``--speculative-ddtree-budget auto``, the chain bucket where it applies, the target's verify resources of
        every smaller bucket and the start-up calibration (``widths``), then (unless ``SGLANG_DDTREE_WARMUP=0``) the
        round's kernels (``warmup``). The scheduler calls this after the target captured its own verify graphs (the
        largest bucket's)."""
        with adapter().drafter_widths(self.config):
            super().init_cuda_graphs()
        self._draft_kv_graphs = self._init_draft_kv_graphs()
        if self.config.adaptive:
            # budget auto on fa3: the buckets also hold the chain that verifies as DFLASH's does (widths.with_chain),
            # decided here, where the target's attention backend exists, before anything reads the buckets
            from sglang_ddtree.worker.widths import with_chain

            self.config = with_chain(self.config, self.target_worker.model_runner, hybrid=self._hybrid)
            self._init_auto()
        if warmup.enabled():
            self._warm_round_kernels()
        if head_graph.enabled():
            self._heads = self._init_heads()

    def _init_heads(self):
        """The tree head's graphs (``head_graph``) where they apply: fa3 with the fused tree attention, the target's
        verify graphs captured, tp 1, no hybrid target; None (the eager head, said once) elsewhere."""
        from sglang_ddtree.worker import widths

        mr = self.target_worker.model_runner
        rank0 = get_tp_group().rank_in_group == 0
        if self._fa3_tree_bits is None:
            self._fa3_tree_bits = self._decide_fa3_tree_bits()
        batch_sizes = sorted(widths.captured_graphs(mr.decode_cuda_graph_runner))
        why = ("the target verifies without DDTREE's fused tree attention on fa3" if not self._fa3_tree_bits else
               "no verify CUDA graphs" if not batch_sizes else "tp > 1" if get_tp_group().world_size > 1 else
               "a hybrid target" if self._hybrid else None)
        if why is None and not head_graph.tree_buckets(self.config):
            why = "no tree bucket"
        if why is not None:
            if rank0 and head_graph.requested():
                logger.warning("DDTREE: %s=1 but the tree head runs eagerly: %s.", head_graph.ENV, why)
            elif rank0:
                logger.info("DDTREE: the tree head runs eagerly (no head graphs): %s.", why)
            return None
        tic = time.perf_counter()
        free0 = torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else None

        def bits_for(tree, budget):
            return fa3_tree.round_bits_out(tree, self.target_worker.model_runner.attn_backend)

        heads = head_graph.for_config(
            self.config, batch_sizes=batch_sizes, device=self.device, req_to_token=mr.req_to_token_pool.req_to_token,
            mask_capacity=int(mr.max_total_num_tokens), slots=assign_extend_cache_locs_func, bits_for=bits_for,
            backend_for=self._widths.active if self._widths is not None else None)
        if rank0:
            used = "" if free0 is None else f", {(free0 - torch.cuda.mem_get_info()[0]) / 2 ** 30:.3f} GB"
            logger.info("DDTREE tree head graphs (%s=0 turns them off): %s, captured in %.1f s%s.", head_graph.ENV,
                        heads.describe(), time.perf_counter() - tic, used)
        return heads

    def _init_draft_kv_graphs(self):
        """The draft-KV append as one graph replay per round (``draft_kv_graph``) where the draft forward has
        CUDA graphs (their batch sizes), tp == 1 and ``SGLANG_DDTREE_DRAFT_KV_GRAPH`` is not 0; None keeps
        upstream's eager call."""
        from sglang_ddtree.worker import widths

        batch_sizes = sorted(widths.captured_graphs(getattr(self.draft_model_runner, "decode_cuda_graph_runner", None)))
        if not batch_sizes or get_tp_group().world_size > 1 or not draft_kv_graph.enabled():
            return None
        try:
            return draft_kv_graph.DraftKVAppendGraphs(
                self._append_target_hidden_to_draft_kv_by_loc, batch_sizes=batch_sizes,
                width=self.config.accept_width, hidden_dim=int(self.draft_model.fc.in_features),
                dtype=self.target_worker.model_runner.dtype, device=self.device,
                owners=(getattr(self, "_fused_kv_helper", None), self.draft_model),
                is_rank0=get_tp_group().rank_in_group == 0)
        except Exception as e:  # e.g. a drafter whose append cannot be captured: the eager call, said once
            logger.warning("DDTREE: draft-KV append graphs not captured (%s: %s); the eager append runs every round "
                           "(%s=0 skips the attempt).", type(e).__name__, e, draft_kv_graph.ENV)
            return None

    def _init_auto(self) -> None:
        from sglang_ddtree.worker import widths

        mr = self.target_worker.model_runner
        rank0 = get_tp_group().rank_in_group == 0
        tic = time.perf_counter()
        self._widths = widths.VerifyWidths(mr, mr.server_args, self.config,
                                           capture_graphs=mr.decode_cuda_graph_runner is not None, is_rank0=rank0)
        target_runner = mr.decode_cuda_graph_runner
        capture_bs = sorted(int(b) for b in getattr(target_runner, "capture_bs", None) or ())
        self._auto = widths.AutoWidth(self.config, capture_bs, max_batch_size=int(mr.max_running_requests),
                                      device=self.device, agree=_tp_mean())
        verify_graphs = {b: widths.captured_graphs(runner) for b, (_, runner) in self._widths.sets.items()}
        if capture_bs and all(verify_graphs.values()):
            draft_graphs = widths.captured_graphs(getattr(self.draft_model_runner, "decode_cuda_graph_runner", None))
            self._auto.calibrate(verify_graphs, draft_graphs, widths.tree_build_ms(self.config, capture_bs, self.device))
        elif rank0:
            logger.warning("DDTREE auto: no CUDA graphs to calibrate from; the cost table fills from observed rounds.")
        if rank0:
            logger.info("DDTREE auto: buckets %s, set up in %.1f s; start-up policy:\n  %s", list(self.config.buckets),
                        time.perf_counter() - tic, "\n  ".join(self._auto.describe()))

    def _warm_round_kernels(self) -> None:
        """Compile the round's eager Triton kernels now, at every width it may verify (``warmup``): compiled on first
        use, each would stall the first round that needs it, with budget auto long after start. A failure here
        leaves them to compile on first use, as before, and says so."""
        tic = time.perf_counter()
        try:
            mr = self.model_runner  # the target's (DFlashWorkerV2 sets it), as the round uses it
            if self._move_kv is None:
                self._move_kv = AcceptedKVMover(mr.token_to_kv_pool)
            if self._fa3_tree_bits is None:
                self._fa3_tree_bits = self._decide_fa3_tree_bits()
            ran = warmup.warm_round_kernels(
                self.config, self.device, tree_bits=self._fa3_tree_bits, vocab_size=int(mr.model_config.vocab_size),
                req_to_token=mr.req_to_token_pool.req_to_token, max_batch_size=int(mr.max_running_requests),
                move_kv=self._move_kv)
        except Exception as e:
            logger.warning("DDTREE: the round's kernels were not compiled at start-up (%s: %s); each compiles at its "
                           "first round.", type(e).__name__, e)
            return
        if get_tp_group().rank_in_group == 0:
            logger.info("DDTREE: round kernels warmed at start-up for budgets %s: %d calls in %.1f s.",
                        list(self.config.buckets), len(ran), time.perf_counter() - tic)

    def _make_next_draft_input_prefill(self, *, bonus_tokens, seq_lens):
        return make_draft_input(bonus_tokens, seq_lens)

    def _make_next_draft_input_decode(self, *, bonus_tokens, new_seq_lens):
        return make_draft_input(bonus_tokens, new_seq_lens)

    # ---- the round ----------------------------------------------------------------------------
    def forward_batch_generation(self, batch, on_publish=None) -> GenerationBatchResult:
        extend = batch.forward_mode.is_extend() or batch.is_extend_in_batch
        if self._auto is not None and (extend or batch.forward_mode.is_idle()):
            self._auto.interrupt()  # budget auto: the last decode round's period would hold this forward
        if extend:
            if self._own_prefill:  # SGLANG_DDTREE_PREFILL_ASYNC=1 (worker.prefill, experimental)
                return prefill.prefill(self, batch, on_publish)
            return super().forward_batch_generation(batch, on_publish)
        # Refused per request on arrival (request_checks); a batch can only get here without them.
        assert not getattr(batch, "return_logprob", False), "return_logprob must be refused per request"
        if batch.spec_info is None:
            batch.spec_info = DDTreeDraftInput.create_idle_input(device=self.device)
        if batch.forward_mode.is_idle():
            return self._idle_result(on_publish)
        admission.count_round()  # the admission window's round count (an integer increment)
        return self._decode_round(batch, on_publish)

    def _decode_round(self, batch, on_publish) -> GenerationBatchResult:
        cfg = self.config
        draft_input = batch.spec_info
        stream = torch.get_device_module(self.device).current_stream()  # the round's, looked up once
        batch.seq_lens.record_stream(stream)
        bs = len(batch.seq_lens)
        prefix = batch.seq_lens  # [bs] committed KV length = the root's position
        # The round's budget: fixed, or with auto the bucket the policy picks from earlier rounds' numbers.
        budget = cfg.budget if self._auto is None else self._auto.choose(bs)
        pending = None if self._auto is None else self._auto.begin(bs, budget, stream)
        n, width = budget + 1, cfg.accept_width  # N = budget + 1, W = max depth + 1 (static, of the largest)

        host = self._host_seq_lens(batch, draft_input)
        # Width 0 (no drafting: the round is one target step on the root, the bonus token) and the chain bucket are
        # chain-shaped: their structure is constant (chain_inputs), so they build no tree, no verify topology and
        # move no KV. A causal one (fa3: its backend is built at top-K 1) needs no mask and no links.
        shaped = chain_shaped(budget)
        causal = cfg.verifies_causally(budget)
        # head graphs (head_graph, on where they apply): a tree round's slots, build and topology as one replay after
        # the draft; the batch size it replays at, or None for the eager head
        head_size = None if self._heads is None or shaped else self._heads.padded(bs, budget, host.mask_sum_bound)
        # What depends on the prefix alone comes before the draft's launch: the host's work between the draft's launch
        # and the verify's is time the GPU waits once the draft is done (the idle gap of session 27's profiles).
        # VERIFY slots: verify_loc [bs*N] int64, req_to_token[b, prefix .. prefix + N) (width 0: one gather)
        req_to_token = self.model_runner.req_to_token_pool.req_to_token
        if head_size is not None:
            verify_loc = None  # the head's
        elif n == 1:
            verify_loc = root_slots(req_to_token, batch.req_pool_indices, prefix)
        else:
            verify_loc = assign_extend_cache_locs_func(
                req_pool_indices=batch.req_pool_indices, req_to_token=req_to_token,
                start_offset=prefix, end_offset=prefix + n, batch_size=bs,
                draft_token_num=n, device=self.device,
            )
        verify_cpu, verify_sum = host.plus(n)
        if shaped:
            chains = self._chain_inputs()
            positions = chains.positions(prefix, n)
            mask = None if causal else chains.root_mask(bs, host.mask_sum_bound)  # causal, or width 0: all True
            r_index, r_next, r_sibling = (None, None, None) if causal else chains.links(bs, n)
        if budget:
            # DRAFT: [bs, L-1, K] float32 log-probs and int64 token ids of block positions 1..L-1.
            log_probs, token_ids = self._draft(batch, draft_input, bs, host)
        head = None
        if shaped:
            tree = chains.tree_of(draft_input.bonus_tokens, token_ids if budget else None, budget)
            tokens = tree.token_ids  # [bs, N] int64, row d at depth d
        elif head_size is not None:  # the same three calls, replayed (their bits into this width's static buffer)
            head = self._heads(head_size, bs, budget, log_probs, token_ids, draft_input.bonus_tokens, prefix,
                               batch.req_pool_indices)
            tree, tokens, verify_loc = head.tree, head.tree.token_ids, head.verify_loc
        else:
            # BUILD: Tree of [bs, N] rows (row 0 the root, the bonus tokens written by the build).
            tree = build_tree(log_probs, token_ids, budget, draft_input.bonus_tokens)
            tokens = tree.token_ids  # [bs, N] int64

        if self._fa3_tree_bits is None:
            self._fa3_tree_bits = self._decide_fa3_tree_bits()
        with self._widths.active(budget) if self._widths is not None else contextlib.nullcontext():
            # fa3's fused tree attention reads ancestor bits from the static buffer of this width's backend; a
            # causal bucket (its backend's top-K is 1) verifies without them
            backend = self.target_worker.model_runner.attn_backend
            bits = self._fa3_tree_bits and not causal
            if shaped:
                tree_bits = fa3_tree.round_tree_bits(tree, cfg, backend) if bits else None
            elif head is not None:
                mask, positions, r_index, r_next, r_sibling = (head.mask, head.positions, head.retrieve_index,
                                                               head.retrieve_next_token, head.retrieve_next_sibling)
                tree_bits = fa3_tree.share_tree_bits(head.tree_bits, backend)
            else:
                # The FULL_MASK is sized by a host bound of sum(prefix); backends index it by the device lengths
                # (and pad with True up to their own host bound). mask [N * (bound + bs * N)] bool, positions
                # [bs*N] int64, retrieve links [bs, N] int64; the same launch writes the ancestor bits.
                tree_bits = fa3_tree.round_bits_out(tree, backend) if bits else None
                mask, positions, r_index, r_next, r_sibling = verify_topology(tree, prefix, host.mask_sum_bound,
                                                                              bits_out=tree_bits)
                if bits:
                    fa3_tree.share_tree_bits(tree_bits, backend)
            verify_input = DDTreeVerifyInput(
                draft_token=tokens.reshape(-1), positions=positions, draft_token_num=n, topk=cfg.topk,
                custom_mask=mask, capture_hidden_mode=CaptureHiddenMode.FULL, retrieve_index=r_index,
                retrieve_next_token=r_next, retrieve_next_sibling=r_sibling, max_depth=cfg.max_depth,
                tree_bits=tree_bits,
            )
            if self._hybrid:  # radix track slots for the verify (extra_buffer strategy only)
                hybrid.HybridStateCommit.prepare_verify(batch)
            logits_output, verify_fb, can_run_cuda_graph = self._verify(batch, verify_input, verify_loc,
                                                                        verify_cpu, verify_sum)
            # the backend that verified (with budget auto, this width's): it holds the verify's forward metadata,
            # which the hybrid COMMIT reads (its requests' mamba slots)
            verify_backend = self.target_worker.model_runner.attn_backend
        # Budget auto's forecast, after the verify's launch (it reads only the draft's outputs): the largest bucket's
        # tree scores [bs, N_max] (expected drafts per bucket) and, with the chain bucket, the top-1 log-probs [bs, D]
        forecast_scores = forecast_chain = None
        if budget and pending is not None and self._auto.wants_forecast(budget):
            forecast_scores = (tree if budget == cfg.budget else build_tree(log_probs, token_ids, cfg.budget)).scores
            if cfg.chain:
                forecast_chain = log_probs[:, :cfg.max_depth, 0]

        # ACCEPT + COMMIT: RoundCommit of [bs, W] / [bs*W] rows (kv_commit), accept_lens 1..W.
        verify_loc_2d = verify_loc.view(bs, n)
        # The target's token at every node [bs, N]: its argmax, or at T > 0 one draw per node from plain
        # decoding's filtered distribution; the same walk accepts either (sampling's docstring).
        if batch.sampling_info.is_all_greedy:
            targets = sampling.greedy_targets(verify_input, batch, logits_output)
        else:
            targets = sampling.node_samples(verify_input, batch, logits_output)
        # A bucket of budget auto with fewer rows than W accepts at most N tokens; the commit pads its columns to W
        # in the same launch (pad_commit's eight PyTorch ops, ~0.4 ms of CPU a round at c 32, session 22's profile).
        # Width 0 (no drafts: each request commits its root) without the launch, unless a hybrid COMMIT reads the
        # commit's context rows.
        root = budget == 0 and not self._hybrid
        c = root_commit(targets, prefix, width) if root else greedy_accept_commit(tree, tokens, targets, verify_loc_2d,
                                                                                  prefix, width)
        if not shaped:  # a chain's accepted nodes were verified at their final slots (chain_inputs)
            if self._move_kv is None:
                self._move_kv = AcceptedKVMover(self.model_runner.token_to_kv_pool)
            self._move_kv(c, width)
        if self._hybrid:  # COMMIT the last accepted node's conv + SSM state (N from this round's verify)
            if self._hybrid_commit is None:
                self._hybrid_commit = hybrid.make_hybrid_commit(
                    self.server_args, self.target_worker.model_runner, log=get_tp_group().rank_in_group == 0)
            self._hybrid_commit(batch, c, verify_input.draft_token_num, prefix, verify_backend)
        new_seq_lens = c.new_seq_lens.to(prefix.dtype)  # [bs] prefix + accept length
        if on_publish is not None:
            on_publish(new_seq_lens)

        hidden = logits_output.hidden_states  # [bs*N, H'] target hidden states the drafter consumes
        if hidden is None:
            raise RuntimeError("DDTREE verify returned no target hidden states (aux capture missing).")
        if root:  # the drafter's new context is the verify's one row per request
            if self._draft_kv_graphs is not None:
                self._draft_kv_graphs.append_root(hidden[:bs], verify_loc, positions, c.accept_lens)
            else:
                self._append_target_hidden_to_draft_kv_by_loc(
                    target_hidden=hidden[:bs], cache_loc=verify_loc, positions=positions, cache_loc_2d=verify_loc_2d,
                    commit_lens=c.accept_lens)
        elif self._draft_kv_graphs is not None:
            self._draft_kv_graphs(hidden, c.ctx_rows, c.ctx_loc_2d, c.ctx_positions, c.accept_lens)
        else:
            self._append_target_hidden_to_draft_kv_by_loc(
                target_hidden=hidden[c.ctx_rows], cache_loc=c.ctx_loc_2d.view(-1), positions=c.ctx_positions,
                cache_loc_2d=c.ctx_loc_2d, commit_lens=c.accept_lens,
            )
        logits_output.hidden_states = None  # keep it off the D2H copy
        if pending is not None:  # width 0 accepts no drafts by construction: nothing to stage
            self._auto.finish(pending, forecast_scores, c.accept_lens if budget else None, forecast_chain, stream)
        return GenerationBatchResult(
            logits_output=logits_output,
            next_token_ids=c.out_tokens.view(-1),  # [bs*W], the first accept_lens[b] of each row valid
            accept_lens=c.accept_lens,
            can_run_cuda_graph=can_run_cuda_graph,
            next_draft_input=make_draft_input(c.bonus, new_seq_lens),
            speculative_num_draft_tokens=width,
            new_seq_lens=new_seq_lens,
            extra_keep_alive_refs=[verify_fb, verify_input, verify_loc],
        )

    def _chain_inputs(self) -> ChainInputs:
        """The constant structure of this server's chain-shaped rounds (width 0, and the chain bucket where budget
        auto holds it), sized for the largest running batch."""
        if self._chains is None:
            self._chains = ChainInputs.for_config(self.config, device=self.device,
                                                  batch_size=int(self.model_runner.max_running_requests))
        return self._chains

    def _decide_fa3_tree_bits(self) -> bool:
        """Rounds write ancestor bits when verify graphs captured fa3's fused tree attention (they read the
        static buffer) or an eager fa3 verify may take it (``fa3_tree``)."""
        on = bool(fa3_tree.static_bit_buffers()) or fa3_tree.target_uses_fa3(self.target_worker.model_runner)
        if on and get_tp_group().rank_in_group == 0:
            logger.info("DDTREE on fa3: tree verify through the fused tree-attention kernel (%s=1).", fa3_tree.ENV)
        return on

    def _draft(self, batch, draft_input, bs: int, host: "_HostLens"):
        """One DFlash forward over [bonus, mask x (L-1)] -> ([bs, L-1, K] log-probs, [bs, L-1, K] ids)."""
        block = self.config.block_size
        self._ensure_draft_block_buffers(bs)
        block_ids = self._draft_block_ids_buf[:bs]
        positions_2d = self._draft_block_positions_buf[:bs]
        draft_loc_2d = self._draft_verify_out_cache_loc_buf[:bs]
        _prepare_dflash_draft_block_unchecked(
            bonus_tokens=draft_input.bonus_tokens.view(-1), prefix_lens=batch.seq_lens.view(-1),
            req_pool_indices=batch.req_pool_indices.view(-1),
            req_to_token=self.model_runner.req_to_token_pool.req_to_token,
            block_ids_out=block_ids, positions_out=positions_2d, cache_loc_out=draft_loc_2d,
            mask_token_id=int(self._mask_token_id),
        )
        embeds = self.target_worker.model_runner.model.get_input_embeddings()(block_ids)
        seq_lens_cpu = self._draft_seq_lens_cpu_buf[:bs]
        host_cpu, host_sum = host.plus(block)
        seq_lens_cpu.copy_(host_cpu)
        forward_batch = ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY,
            batch_size=bs,
            input_ids=block_ids.flatten(),
            req_pool_indices=batch.req_pool_indices,
            seq_lens=batch.seq_lens,
            out_cache_loc=draft_loc_2d.reshape(-1),
            seq_lens_sum=host_sum,
            seq_lens_cpu=seq_lens_cpu,
            positions=positions_2d.reshape(-1),
            input_embeds=embeds.view(-1, embeds.shape[-1]),
            spec_algorithm=SpeculativeAlgorithm.DFLASH,
            spec_info=self._draft_block_spec_info,
            capture_hidden_mode=CaptureHiddenMode.NULL,
        )
        with torch.inference_mode(), adapter().drafter_widths(self.config):
            draft_out = self.draft_model_runner.forward(forward_batch)
        if self._draft_sampler is not None and draft_out.can_run_graph:
            return self._draft_sampler.read(bs)
        hidden = draft_out.logits_output.hidden_states
        if hidden is None:
            raise RuntimeError("DDTREE: the DFlash draft forward returned no hidden states.")
        return self._eager_head.compute(hidden)

    def _verify(self, batch, verify_input, verify_loc, verify_cpu, verify_sum):
        """Target forward over the trees; returns (logits output, forward batch, ran a CUDA graph)."""
        batch.out_cache_loc = verify_loc
        saved = (batch.seq_lens_cpu, batch.seq_lens_sum)
        batch.seq_lens_cpu, batch.seq_lens_sum = verify_cpu, verify_sum
        forward_batch, _ = verify_input.prepare_for_verify(batch, self.target_worker)
        batch.seq_lens_cpu, batch.seq_lens_sum = saved
        out = self.target_worker.forward_batch_generation(
            batch=None, forward_batch=forward_batch, is_verify=True, skip_attn_backend_init=True
        )
        return out.logits_output, forward_batch, out.can_run_cuda_graph

    def _host_seq_lens(self, batch, draft_input) -> "_HostLens":
        """Host-side lengths for attention planning and mask sizing, once per round, without a device
        sync unless no host-side source exists.
        ``batch.seq_lens_cpu`` holds the published lengths (overlap, backends that need them) or the
        synchronous path's; the scheduler's seed may lag by one round's commit (<= W per request),
        which the extra slots of ``_HostLens.plus`` (>= W) and the mask bound's ``bs * W`` cover."""
        lag = len(batch.seq_lens) * self.config.accept_width
        if batch.seq_lens_cpu is not None:
            committed = batch.seq_lens_cpu.to(torch.int64)
        elif adapter().reserved_lens_cpu(draft_input) is not None:  # >= committed + reserve: already a bound
            bound = adapter().reserved_lens_cpu(draft_input).to(torch.int64)
            total = int(bound.sum())
            return _HostLens(bound, total, add_extra=False, mask_sum_bound=total)
        else:
            if not self._warned_host_sync:
                logger.warning("DDTREE: no host-side sequence lengths; syncing once per round.")
                self._warned_host_sync = True
            committed = batch.seq_lens.to("cpu", dtype=torch.int64)
        total = int(committed.sum())
        return _HostLens(committed, total, add_extra=True, mask_sum_bound=total + lag)

    def _idle_result(self, on_publish) -> GenerationBatchResult:
        empty_ids = torch.empty((0,), dtype=torch.int64, device=self.device)
        next_draft_input = make_draft_input(empty_ids, empty_ids)
        if on_publish is not None:
            on_publish(next_draft_input.new_seq_lens)
        return GenerationBatchResult(
            logits_output=None,
            next_token_ids=empty_ids,
            accept_lens=torch.empty((0,), dtype=torch.int32, device=self.device),
            next_draft_input=next_draft_input,
            can_run_cuda_graph=False,
            speculative_num_draft_tokens=self.config.accept_width,
            new_seq_lens=next_draft_input.new_seq_lens,
        )


def _tp_mean():
    """Under tensor parallelism, the ranks' mean of a list of floats over the TP group's CPU (gloo) group: budget
    auto's ``agree`` (``widths.AutoWidth``), called by every rank at the same point with lists of one length; None
    on one rank."""
    group = get_tp_group()
    if group.world_size <= 1:
        return None

    def mean(values):
        t = torch.tensor(list(values), dtype=torch.float64)
        torch.distributed.all_reduce(t, group=group.cpu_group)
        return (t / group.world_size).tolist()

    return mean


class _HostLens:
    """One round's host-side lengths: ``plus(extra)`` -> (per-request upper bound of the lengths a forward
    of ``extra`` new tokens per request reaches [bs] int64 CPU, its sum); ``mask_sum_bound`` bounds
    sum(committed lengths) for sizing the FULL_MASK."""

    __slots__ = ("base", "base_sum", "add_extra", "mask_sum_bound")

    def __init__(self, base: torch.Tensor, base_sum: int, *, add_extra: bool, mask_sum_bound: int):
        self.base, self.base_sum, self.add_extra, self.mask_sum_bound = base, base_sum, add_extra, mask_sum_bound

    def plus(self, extra: int):
        if not self.add_extra:  # the reservation already covers the round's writes
            return self.base, self.base_sum
        return self.base + extra, self.base_sum + extra * self.base.numel()
