"""DDTREE_TEST_PHASE_TIMES=<path>: where the scheduler process's wall time goes, per decode iteration, without a
profiler (a diagnostic, the tests' plugin only).

Why: the torch profiler with Python stacks inflates Python time about 2-3x, unevenly. Session 33's profiled tiny-pair
runs at bs 16 put a width-0 round's whole iteration at 1.24x plain decoding's step, while the same engines unprofiled
ran at 0.55x plain's throughput: something costs the unprofiled width-0 round time the profile does not show (a host
wait is one candidate: with the CPU slowed by the profiler the GPU is always done first). These AROUND hooks time
chosen functions with ``time.perf_counter`` (about a microsecond a call) and nothing else.

What is written (``<path>.<pid>.json``, rewritten every ``DUMP_EVERY`` scheduler iterations and at exit):
  iterations: the scheduler loop's iterations, one per ``Scheduler.run_batch``, split by the batch's forward mode;
  period_us: from one decode ``run_batch`` start to the next one's, when both are decode (median, mean, count);
  loop_steps_us_per_decode_iteration: the overlap loop's own steps (``LOOP_STEPS``) summed, per decode iteration
    (against the period's mean: what none of them holds);
  span_us, transitions_us: from the first ``run_batch`` to the last, and that wall time split by (iteration's mode ->
    next iteration's mode): decode->decode is every period, decode->extend a wave's last round with what follows it
    (an idle wait for the next requests), extend->decode a prefill;
  targets: per timed function, calls and total microseconds inside decode iterations (an iteration runs from its
    ``run_batch`` start to the next one's: the previous batch's result processing and the next batch's scheduling
    fall in it, as in the overlap loop);
  other_modes: the same for every other iteration mode (``extend``: a prefill, with the scheduling of the decode
    batch after it), per mode, per iteration of that mode.
  Times are inclusive: ``run_batch`` holds the worker's round. ``gc``: the garbage collector's pauses
  (``gc.callbacks``), wherever they fell.
Every target is optional: one that does not resolve in the installed SGLang is skipped (``resolvable``).

DDTREE_TEST_SYNC_WATCH=<path> (instead of the above): the same file, but only the loop's steps and the explicit host
waits are timed (``WAIT_TARGETS``: little Python added, so a wait that a slower host would hide stays visible), and
after ``SyncWatch.AFTER`` decode iterations torch's sync debug mode is switched on: every synchronizing CUDA call
(``.item()``, ``.tolist()`` / ``.cpu()`` of a device tensor, a blocking copy, ``nonzero``, ...) is counted by the
Python stack it came from, and the caching allocator's device allocations, frees and retries over the same window
(each a possible device-wide wait) are counted too (``sync_watch`` in the file).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import pkgutil
import statistics
import threading
import time
import traceback
import warnings
from typing import Dict, List, Optional, Tuple

RUN_BATCH = "sglang.srt.managers.scheduler.Scheduler.run_batch"
# (target, label): the scheduler loop, plain decoding's step, the DDTREE round and its parts, the host waits
TARGETS: Tuple[Tuple[str, str], ...] = (
    (RUN_BATCH, "run_batch"),
    ("sglang.srt.managers.scheduler.Scheduler.get_next_batch_to_run", "get_next_batch_to_run"),
    ("sglang.srt.managers.scheduler.Scheduler.update_running_batch", "update_running_batch"),
    ("sglang.srt.managers.scheduler.Scheduler.process_batch_result", "process_batch_result"),
    ("sglang.srt.managers.scheduler.Scheduler.process_input_requests", "process_input_requests"),
    ("sglang.srt.managers.scheduler_components.request_receiver.SchedulerRequestReceiver.recv_requests",
     "recv_requests"),
    ("sglang.srt.managers.scheduler.Scheduler.on_idle", "on_idle"),
    ("sglang.srt.managers.overlap_utils.FutureMap.resolve_seq_lens_cpu", "FutureMap.resolve_seq_lens_cpu"),
    ("sglang.srt.managers.overlap_utils.FutureMap.publish", "FutureMap.publish"),
    ("sglang.srt.managers.overlap_utils.resolve_forward_inputs", "resolve_forward_inputs"),
    ("sglang.srt.managers.scheduler.Scheduler._relay_forward_payload", "_relay_forward_payload"),
    ("sglang.srt.model_executor.forward_batch_info.ForwardBatch.init_new", "ForwardBatch.init_new"),
    ("sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner.load_batch",
     "graph_runner.load_batch"),
    ("sglang.srt.model_executor.runner.decode_cuda_graph_runner.DecodeCudaGraphRunner.execute", "graph_runner.execute"),
    ("torch.cuda.graphs.CUDAGraph.replay", "CUDAGraph.replay"),
    ("triton.runtime.jit.JITFunction.run", "triton launches"),
    ("sglang.srt.managers.scheduler.Scheduler.launch_batch_sample_if_needed", "launch_batch_sample_if_needed"),
    ("sglang.srt.managers.scheduler.Scheduler._apply_war_barrier", "_apply_war_barrier"),
    ("sglang.srt.managers.scheduler_components.output_streamer.SchedulerOutputStreamer.stream_output",
     "stream_output"),
    ("sglang.srt.managers.schedule_batch.ScheduleBatch.prepare_for_decode", "ScheduleBatch.prepare_for_decode"),
    ("sglang_ddtree.worker.info.DDTreeDraftInput.prepare_for_decode", "DDTreeDraftInput.prepare_for_decode"),
    ("sglang.srt.managers.tp_worker.TpModelWorker.forward_batch_generation", "TpModelWorker.forward_batch_generation"),
    ("sglang.srt.model_executor.model_runner.ModelRunner.forward", "ModelRunner.forward"),
    ("sglang.srt.model_executor.model_runner.ModelRunner.sample", "ModelRunner.sample"),
    ("sglang_ddtree.worker.worker.DDTreeWorker.forward_batch_generation", "DDTreeWorker.forward_batch_generation"),
    ("sglang_ddtree.worker.worker.DDTreeWorker._decode_round", "_decode_round"),
    ("sglang_ddtree.worker.worker.DDTreeWorker._verify", "_verify"),
    ("sglang.srt.speculative.dflash_info.DFlashVerifyInput.prepare_for_verify", "prepare_for_verify"),
    # the round's parts, each called at most once a round (``ROUND_LABELS``, in the split set)
    ("sglang_ddtree.worker.worker.DDTreeWorker._host_seq_lens", "_host_seq_lens"),
    ("sglang_ddtree.worker.worker.DDTreeWorker._draft", "_draft"),
    ("sglang_ddtree.worker.worker._prepare_dflash_draft_block_unchecked", "draft block inputs"),
    ("sglang_ddtree.worker.draft_head.DraftTopKHead.read", "draft top-K read"),
    ("sglang_ddtree.worker.worker.build_tree", "build_tree"),
    ("sglang_ddtree.worker.worker.fill_root", "fill_root"),
    ("sglang_ddtree.worker.worker.verify_topology", "verify_topology"),
    ("sglang_ddtree.worker.chain_inputs.ChainInputs.tree_of", "ChainInputs.tree_of"),
    ("sglang_ddtree.worker.fa3_tree.round_tree_bits", "round_tree_bits"),
    ("sglang_ddtree.worker.sampling.greedy_targets", "greedy_targets"),
    ("sglang_ddtree.worker.kv_commit.AcceptedKVMover.__call__", "move_kv"),
    ("sglang_ddtree.worker.worker.assign_extend_cache_locs_func", "assign_extend_cache_locs"),
    ("sglang_ddtree.worker.worker.greedy_accept_commit", "greedy_accept_commit"),
    ("sglang_ddtree.worker.draft_kv_graph.DraftKVAppendGraphs.__call__", "draft_kv_append"),
    ("sglang_ddtree.worker.worker.make_draft_input", "make_draft_input"),
    ("sglang_ddtree.worker.widths.AutoWidth.choose", "AutoWidth.choose"),
    ("sglang_ddtree.worker.widths.AutoWidth.begin", "AutoWidth.begin"),
    ("sglang_ddtree.worker.widths.AutoWidth.finish", "AutoWidth.finish"),
    ("torch.cuda.streams.Event.synchronize", "Event.synchronize"),
    ("torch.cuda.streams.Stream.synchronize", "Stream.synchronize"),
    ("torch.cuda.synchronize", "torch.cuda.synchronize"),
    # the prefill iteration's parts (``other_modes``): DFLASH's prefill and draft-KV materialisation, the KV
    # reservation's allocator call, the radix cache's bookkeeping
    ("sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2.forward_batch_generation", "DFlashWorkerV2.forward"),
    ("sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2._append_target_hidden_to_draft_kv_by_loc",
     "draft_kv_append_eager"),
    ("sglang_ddtree.worker.info.alloc_for_spec_decode", "alloc_for_spec_decode"),
    ("sglang.srt.mem_cache.radix_cache.RadixCache.cache_finished_req", "RadixCache.cache_finished_req"),
    ("sglang.srt.mem_cache.radix_cache.RadixCache.cache_unfinished_req", "RadixCache.cache_unfinished_req"),
    ("sglang.srt.mem_cache.radix_cache.RadixCache.evict", "RadixCache.evict"),
    ("sglang.srt.managers.scheduler.Scheduler.get_new_batch_prefill", "get_new_batch_prefill"),
    ("sglang.srt.managers.schedule_batch.ScheduleBatch.prepare_for_extend", "ScheduleBatch.prepare_for_extend"),
    # session 44 (a read of the 0.5.16 prefill path): the prefill graph's replay; DFLASH's second position launch,
    # entered right after its two blocking list-to-device copies (DFlashWorkerV2.forward less the target forward,
    # this, the draft-KV append and make_draft_input is that wait); the prefill's result, the merge into the running
    # batch and the prefill's log line (these three run in the next iteration, a decode one)
    ("sglang.srt.model_executor.runner.prefill_cuda_graph_runner.PrefillCudaGraphRunner.execute",
     "prefill_graph.execute"),
    ("sglang.srt.speculative.dflash_worker_v2.compute_position", "dflash compute_position"),
    ("sglang_ddtree.worker.prefill.prefill", "DDTREE prefill"),  # SGLANG_DDTREE_PREFILL_ASYNC=1 (+prefillasync)
    ("sglang.srt.managers.scheduler_components.batch_result_processor.SchedulerBatchResultProcessor."
     "process_batch_result_prefill", "process_batch_result_prefill"),
    ("sglang.srt.managers.schedule_batch.ScheduleBatch.merge_batch", "ScheduleBatch.merge_batch"),
    ("sglang.srt.managers.scheduler_components.metrics_reporter.SchedulerMetricsReporter.report_prefill_stats",
     "report_prefill_stats"),
)
# DDTREE_TEST_SYNC_WATCH's targets: the loop's steps and the explicit waits (few hooks, little Python added)
WAIT_TARGETS = frozenset({"run_batch", "get_next_batch_to_run", "process_batch_result", "recv_requests",
                          "process_input_requests", "launch_batch_sample_if_needed", "_apply_war_barrier", "on_idle",
                          "Event.synchronize", "Stream.synchronize", "torch.cuda.synchronize"})
# the prefill iteration's parts: DFLASH's prefill with its draft-KV materialisation and the batch's extend set-up run
# only in a prefill iteration; the scheduler asks get_new_batch_prefill every iteration (~1 us of timer each, every
# config alike); the prefill's result and merge run in the next iteration; alloc_for_spec_decode, the KV top-up, in
# a decode round whose batch gained requests. In the split set too, so that PAIRED_PHASES=1 ... +split says where a one-length load's prefill
# iterations go (session 44)
PREFILL_LABELS = frozenset({"DFlashWorkerV2.forward", "draft_kv_append_eager", "get_new_batch_prefill",
                            "ScheduleBatch.prepare_for_extend", "prefill_graph.execute", "dflash compute_position",
                            "process_batch_result_prefill", "ScheduleBatch.merge_batch", "report_prefill_stats",
                            "alloc_for_spec_decode", "DDTREE prefill"})
# DDTREE_TEST_PHASE_SPLIT's targets: WAIT_TARGETS and the parts of a decode iteration each called about once an
# iteration (the scheduling, the future map, the forward's set-up and replay, sampling, the round and its verify),
# few enough hooks (~1 us each) that a speculative iteration compares with a plain one; the full set times hot
# functions (every Triton launch, every graph replay) and inflated plain decoding's period ~1.8x (session 34)
# the DDTREE round's parts, each called at most once a round (~1 us of timer a call: ~15 us a DDTREE round that
# plain decoding does not pay)
ROUND_LABELS = frozenset({
    "_host_seq_lens", "_draft", "draft block inputs", "draft top-K read", "build_tree", "fill_root", "verify_topology",
    "ChainInputs.tree_of", "round_tree_bits", "greedy_targets", "move_kv", "assign_extend_cache_locs",
    "greedy_accept_commit", "draft_kv_append", "make_draft_input", "AutoWidth.choose", "AutoWidth.begin",
    "AutoWidth.finish"})
SPLIT_LABELS = WAIT_TARGETS | ROUND_LABELS | frozenset({
    "update_running_batch", "ScheduleBatch.prepare_for_decode", "DDTreeDraftInput.prepare_for_decode",
    "FutureMap.resolve_seq_lens_cpu", "FutureMap.publish", "resolve_forward_inputs", "_relay_forward_payload",
    "stream_output", "TpModelWorker.forward_batch_generation", "ModelRunner.forward", "ModelRunner.sample",
    "graph_runner.load_batch", "graph_runner.execute", "DDTreeWorker.forward_batch_generation", "_decode_round",
    "_verify", "prepare_for_verify"}) | PREFILL_LABELS
# the overlap loop's own steps (``Scheduler.event_loop_overlap``): their sum against the period says how much of an
# iteration none of them holds
LOOP_STEPS = ("recv_requests", "process_input_requests", "get_next_batch_to_run", "run_batch", "process_batch_result",
              "launch_batch_sample_if_needed", "_apply_war_barrier", "on_idle")
DUMP_EVERY = 64  # scheduler iterations between rewrites of the JSON file


def resolvable(target: str) -> bool:
    """Whether ``target`` (module path + attribute) names something in this process's packages."""
    owner, _, attr = target.rpartition(".")
    try:
        return hasattr(pkgutil.resolve_name(owner), attr)
    except Exception:
        return False


class PhaseTimes:
    """The accumulators of one process (``clock``: seconds, ``time.perf_counter`` in serving)."""

    def __init__(self, path: str, clock=time.perf_counter):
        self.path, self.clock = path, clock
        # iteration mode -> label -> [calls, total seconds, longest seconds]: "decode" makes ``targets``, the other
        # modes ``other_modes``
        self.timed: Dict[str, Dict[str, List[float]]] = {}
        self.iterations: Dict[str, int] = {}
        self.periods_s: List[float] = []
        # wall time from one iteration's start to the next one's, by (this mode -> next mode): decode -> decode is
        # the periods' sum; decode -> extend holds a wave's end (with any idle wait before the next prefill)
        self.transitions_s: Dict[str, float] = {}
        self._last: Optional[Tuple[str, float]] = None  # (mode, start) of the latest iteration
        self._first_start: Optional[float] = None
        self._since_dump = 0
        self._gc_start: Optional[float] = None
        self.sync_watch: Optional["SyncWatch"] = None  # DDTREE_TEST_SYNC_WATCH

    def begin_iteration(self, batch, now: float) -> None:
        """A ``run_batch`` starts: a new iteration (decode or not) and, between two decode ones, a period."""
        mode = getattr(batch, "forward_mode", None)
        is_decode = bool(mode is not None and mode.is_decode())
        name = "decode" if is_decode else (getattr(mode, "name", None) or "other").lower()
        self.iterations[name] = self.iterations.get(name, 0) + 1
        if self._last is not None:
            key = f"{self._last[0]}->{name}"
            self.transitions_s[key] = self.transitions_s.get(key, 0.0) + (now - self._last[1])
            if key == "decode->decode":
                self.periods_s.append(now - self._last[1])
        else:
            self._first_start = now
        self._last = (name, now)
        if is_decode and self.sync_watch is not None:
            self.sync_watch.decode_iteration()
        self._since_dump += 1
        if self._since_dump >= DUMP_EVERY:
            self._since_dump = 0
            self.dump()

    @property
    def calls(self) -> Dict[str, int]:
        """Calls per label inside decode iterations."""
        return {label: int(acc[0]) for label, acc in self.timed.get("decode", {}).items()}

    def add(self, label: str, seconds: float) -> None:
        if self._last is None:
            return
        acc = self.timed.setdefault(self._last[0], {}).setdefault(label, [0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += seconds
        acc[2] = max(acc[2], seconds)

    def gc_callback(self, phase: str, info: dict) -> None:
        """``gc.callbacks`` entry: a collection's pause counts as target ``gc``."""
        if phase == "start":
            self._gc_start = self.clock()
        elif self._gc_start is not None:
            self.add("gc", self.clock() - self._gc_start)
            self._gc_start = None

    def around(self, label: str):
        """The AROUND hook of one target: times the call; ``run_batch`` also starts an iteration."""
        clock = self.clock

        def hook(original, *args, **kwargs):
            t0 = clock()
            if label == "run_batch":
                self.begin_iteration(args[1] if len(args) > 1 else kwargs.get("batch"), t0)
            try:
                return original(*args, **kwargs)
            finally:
                self.add(label, clock() - t0)

        hook.__name__ = f"phase_time_{label}"
        return hook

    def summary(self) -> dict:
        periods = [p * 1e6 for p in self.periods_s]
        decode = self.iterations.get("decode", 0)
        timed = self.timed.get("decode", {})
        loop = sum(timed[k][1] for k in LOOP_STEPS if k in timed) * 1e6
        return {
            "format": 1, "pid": os.getpid(), "iterations": dict(self.iterations),
            "loop_steps_us_per_decode_iteration": round(loop / decode, 1) if decode else None,
            "span_us": round((self._last[1] - self._first_start) * 1e6, 1) if self._last else None,
            "transitions_us": {k: round(v * 1e6, 1) for k, v in sorted(self.transitions_s.items())},
            "period_us": {"count": len(periods), "median": statistics.median(periods) if periods else None,
                          "mean": statistics.fmean(periods) if periods else None},
            "targets": {label: {"calls": int(c), "total_us": round(t * 1e6, 1),
                                "us_per_decode_iteration": round(t * 1e6 / decode, 1) if decode else None,
                                "max_us": round(m * 1e6, 1)}
                        for label, (c, t, m) in _by_total(timed)},
            "other_modes": {mode: {label: {"calls": int(c), "total_us": round(t * 1e6, 1),
                                           "us_per_iteration": round(t * 1e6 / max(1, self.iterations.get(mode, 0)), 1),
                                           "max_us": round(m * 1e6, 1)}
                                   for label, (c, t, m) in _by_total(labels)}
                            for mode, labels in sorted(self.timed.items()) if mode != "decode"},
            **({"sync_watch": self.sync_watch.summary()} if self.sync_watch is not None else {}),
        }

    def dump(self) -> None:
        """Write the summary (a process that ran no batch, e.g. the tokenizer's, writes nothing)."""
        if not self.iterations:
            return
        tmp = f"{self.path}.{os.getpid()}.json.tmp"
        with open(tmp, "w") as f:
            json.dump(self.summary(), f, indent=1)
        os.replace(tmp, f"{self.path}.{os.getpid()}.json")


def _by_total(labels: Dict[str, List[float]]) -> list:
    """(label, [calls, total, longest]) pairs, the largest total first."""
    return sorted(labels.items(), key=lambda kv: -kv[1][1])


SYNC_MESSAGE = "called a synchronizing CUDA operation"  # torch's sync debug warning (set_sync_debug_mode)


class SyncWatch:
    """Counts the synchronizing CUDA calls of decode iterations after the first ``after`` ones, by call site (the
    innermost ``STACK`` Python frames outside ``warnings`` and this module), and the caching allocator's device
    allocations / frees / retries over the same window. ``cuda``: the ``torch.cuda`` module (a stand-in in tests)."""

    AFTER = 32  # decode iterations before the watch starts: start-up, CUDA-graph and JIT one-offs stay out
    STACK = 6
    ALLOCATOR_KEYS = ("num_device_alloc", "num_device_free", "num_alloc_retries", "num_sync_all_streams")

    def __init__(self, cuda, after: int = AFTER):
        self.cuda, self.after = cuda, after
        self.decode_iterations = 0
        self.sites: Dict[str, int] = {}
        self._allocator_start: Optional[Dict[str, int]] = None
        self._clocks_start: Optional[Dict[str, float]] = None
        self._previous_showwarning = None

    def decode_iteration(self) -> None:
        self.decode_iterations += 1
        if self.decode_iterations == self.after + 1:
            self.start()

    def start(self) -> None:
        warnings.filterwarnings("always", message=f".*{SYNC_MESSAGE}")
        self._previous_showwarning = warnings.showwarning
        warnings.showwarning = self.showwarning
        self._allocator_start = self._allocator()
        self._clocks_start = self._clocks()
        self.cuda.set_sync_debug_mode("warn")

    @staticmethod
    def _clocks() -> Dict[str, float]:
        """Wall, this (the scheduler's main) thread's CPU and the whole process's CPU seconds: a main thread whose CPU
        time falls short of the wall time was blocked (a wait, a sleep, the GIL); a process whose CPU time exceeds the
        main thread's has other threads at work."""
        return {"wall": time.perf_counter(), "main_thread_cpu": time.thread_time(), "process_cpu": time.process_time()}

    def _allocator(self) -> Dict[str, int]:
        stats = self.cuda.memory_stats()
        return {k: int(stats.get(k, 0)) for k in self.ALLOCATOR_KEYS}

    def showwarning(self, message, category, filename, lineno, file=None, line=None):
        if SYNC_MESSAGE not in str(message):
            return self._previous_showwarning(message, category, filename, lineno, file, line)
        frames = [f for f in traceback.extract_stack()[:-1]
                  if not f.filename.endswith(("warnings.py", "phase_times.py"))][-self.STACK:]
        site = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in reversed(frames))
        self.sites[site] = self.sites.get(site, 0) + 1

    def summary(self) -> dict:
        watched = max(0, self.decode_iterations - self.after)
        allocator = None
        if self._allocator_start is not None:
            now = self._allocator()
            allocator = {k: now[k] - self._allocator_start[k] for k in self.ALLOCATOR_KEYS}
        clocks = None
        if self._clocks_start is not None and watched:
            now = self._clocks()
            clocks = {f"{k}_us_per_decode_iteration": round((now[k] - self._clocks_start[k]) * 1e6 / watched, 1)
                      for k in now}
        return {"after_decode_iterations": self.after, "watched_decode_iterations": watched,
                "syncs": sum(self.sites.values()), "allocator": allocator, "clocks": clocks,
                "threads": sorted(t.name for t in threading.enumerate()),
                "sites": dict(sorted(self.sites.items(), key=lambda kv: -kv[1]))}


_TIMES: Optional[PhaseTimes] = None


def planned(path: str, *, sync_watch: bool = False, split: bool = False) -> List[Tuple[str, object]]:
    """[(target, AROUND hook)] for every resolvable target (``sync_watch``: ``WAIT_TARGETS`` only, and the sync watch
    on; ``split``: ``SPLIT_LABELS`` only); the process's accumulators write to ``path``."""
    global _TIMES
    if _TIMES is None:
        _TIMES = PhaseTimes(path)
        atexit.register(_TIMES.dump)
        gc.callbacks.append(_TIMES.gc_callback)
        if sync_watch:
            import torch

            _TIMES.sync_watch = SyncWatch(torch.cuda)
    only = WAIT_TARGETS if sync_watch else SPLIT_LABELS if split else None
    return [(target, _TIMES.around(label)) for target, label in TARGETS
            if resolvable(target) and (only is None or label in only)]
