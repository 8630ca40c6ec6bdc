"""benchmark/analyze_trace.py: per-phase GPU attribution, GPU idle and host syncs, on synthetic traces.

The traces are built here in the shape torch.profiler 2.11 writes (checked against a real H200 trace of a
stand-in round): python_function spans with ``Python id`` / ``Python parent id``; cuda_runtime (and, for
Triton, cuda_driver ``cuLaunchKernelEx``) calls on the Python thread; GPU ops on pid = device, tid = stream;
a launch and its GPU ops sharing ``args.correlation`` (all kernels of a graph replay carry their
``cudaGraphLaunch``'s, and have no ``External id``); ``ac2g`` flow arrows from call to op (id = correlation).
GPU ops run later than the CPU span that launched them, so attribution by time alone would fail.
"""

import gzip
import importlib.util
import json
import os
import subprocess
import sys

import pytest

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "benchmark", "analyze_trace.py")
spec = importlib.util.spec_from_file_location("analyze_trace", _PATH)
at = importlib.util.module_from_spec(spec)
spec.loader.exec_module(at)

PID = TID = 4242  # the scheduler process and its main thread
DEVICE, STREAM = 0, 7
WORKER = "sglang_ddtree/worker/worker.py"
SYNC_CUDA, SYNC_STREAM = "torch/cuda/__init__.py:synchronize", "torch/cuda/streams.py:synchronize"


class Trace:
    """Appends events; ``link`` picks how GPU ops name their launch: 'correlation' (as torch 2.11 writes),
    'flow' (no correlation args, only the ac2g arrows) or 'external' (only the CPU op's External id)."""

    def __init__(self, link: str = "correlation"):
        self.link, self._py, self._corr, self._ext = link, 0, 100, 0
        self.events = [
            {"name": "process_name", "ph": "M", "ts": 0, "pid": PID, "tid": 0, "args": {"name": "python3"}},
            {"name": "thread_name", "ph": "M", "ts": 0, "pid": DEVICE, "tid": STREAM, "args": {"name": "stream 7 "}},
        ]

    def py(self, name: str, ts: float, dur: float, parent=None) -> int:
        self._py += 1
        self.events.append({"ph": "X", "cat": "python_function", "name": name, "pid": PID, "tid": TID, "ts": ts,
                            "dur": dur, "args": {"Python parent id": parent, "Python id": self._py,
                                                 "Ev Idx": self._py}})
        return self._py

    def call(self, name: str, ts: float, ops=(), dur: float = 3.0, cat: str = "cuda_runtime", stream: int = STREAM):
        """One runtime / driver call at ts and the GPU ops (cat, name, ts, dur) it launched on ``stream``."""
        self._corr += 1
        graph = name == "cudaGraphLaunch"
        ext = None if graph else self._ext + 1
        self._ext += not graph
        args = {"cbid": 211, "correlation": self._corr}
        if ext is not None:
            args["External id"] = ext
            self.events.append({"ph": "X", "cat": "cpu_op", "name": "aten::op", "pid": PID, "tid": TID,
                                "ts": ts - 1, "dur": dur + 2, "args": {"External id": ext}})
            self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaFuncGetAttributes", "pid": PID,
                                "tid": TID, "ts": ts - 0.5, "dur": 0.2,
                                "args": {"External id": ext, "cbid": 15, "correlation": self._corr + 10**6}})
        if self.link != "correlation":
            del args["correlation"]
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur,
                            "args": args})
        if self.link != "external" and ops:
            self.events.append({"ph": "s", "id": self._corr, "pid": PID, "tid": TID, "ts": ts, "cat": "ac2g",
                                "name": "ac2g"})
        for op in ops:
            op_cat, op_name, op_ts, op_dur = op[:4]
            op_args = {"device": DEVICE, "context": 1, "stream": stream, "correlation": self._corr}
            if len(op) > 4:  # the launch grid, as Kineto records it for kernels
                op_args["grid"] = op[4]
            if ext is not None:
                op_args["External id"] = ext
            if self.link != "correlation":
                del op_args["correlation"]
            self.events.append({"ph": "X", "cat": op_cat, "name": op_name, "pid": DEVICE, "tid": stream,
                                "ts": op_ts, "dur": op_dur, "args": op_args})
            if self.link != "external":
                self.events.append({"ph": "f", "id": self._corr, "pid": DEVICE, "tid": stream, "ts": op_ts,
                                    "cat": "ac2g", "name": "ac2g", "bp": "e"})

    def dict(self) -> dict:
        return {"schemaVersion": 1, "traceEvents": self.events}


def kernel(name, ts, dur):
    return ("kernel", name, ts, dur)


N, BASE, PERIOD = 5, 1_000_000.0, 1000.0
# Per decode round at offset o (GPU ops are laid out without overlap; all numbers in us):
EXPECT = {  # phase -> (CPU us, GPU us, GPU ops, eager launches, graph launches)
    "<built-in method record_stream>": (3, 0, 0, 0, 0),
    "_draft": (100, 50, 2, 2, 0),
    "build_tree": (50, 10, 1, 1, 0),
    "_verify": (60, 202, 4, 0, 1),
    "greedy_accept_commit": (200, 2, 1, 1, 0),
    "move_kv_cache": (90, 4, 2, 2, 0),
    SYNC_CUDA: (70, 0, 0, 0, 0),
    SYNC_STREAM: (10, 0, 0, 0, 0),
    at.OUTSIDE_PHASES: (700 - 583, 4, 1, 1, 0),
}
BUSY = 30 + 20 + 10 + 202 + 4 + 2 + 3 + 1 + 5  # per period, with the between-rounds kernel


def ddtree_trace(link: str = "correlation", side_stream: bool = False) -> dict:
    """``side_stream``: _draft also launches a 30-us copy on stream 9 that runs beside the verify graph's mlp."""
    t = Trace(link)
    loop = t.py("sglang/srt/managers/scheduler.py(1050): event_loop_overlap", BASE - 100, 20_000)
    # A first round 10x the others (prefill-like): left out, and its launches counted nowhere.
    fbg = t.py(f"{WORKER}(90): forward_batch_generation", BASE, 7000, loop)
    first = t.py(f"{WORKER}(114): _decode_round", BASE, 7000, fbg)
    draft = t.py(f"{WORKER}(180): _draft", BASE + 10, 6000, first)
    t.call("cudaLaunchKernel", BASE + 50, [kernel("prefill_gemm", BASE + 100, 500)])
    for i in range(N):
        o = BASE + 8000 + PERIOD * i
        fbg = t.py(f"{WORKER}(90): forward_batch_generation", o - 5, 710, loop)
        r = t.py(f"{WORKER}(114): _decode_round", o, 700, fbg)
        t.py("<built-in method record_stream of Tensor object at 0x7f4f94f4ba70>", o + 2, 3, r)
        draft = t.py(f"{WORKER}(180): _draft", o + 10, 100, r)
        t.py("<built-in method softmax of type object at 0x7f5262d3e180>", o + 15, 50, draft)
        t.call("cudaLaunchKernel", o + 20, [kernel("draft_a", o + 30, 30)])
        t.call("cudaLaunchKernelExC", o + 40, [kernel("draft_gemm", o + 60, 20)])
        if side_stream:  # mlp runs o + 320 .. 370: 30 us of it beside this copy
            t.call("cudaLaunchKernel", o + 45, [kernel("side_copy", o + 330, 30)], stream=9)
        t.py("sglang_ddtree/tree/build.py(40): build_tree", o + 120, 50, r)
        t.call("cuLaunchKernelEx", o + 130, [kernel("build_tree_kernel", o + 140, 10)], cat="cuda_driver")
        t.py(f"{WORKER}(230): _verify", o + 200, 60, r)
        t.call("cudaStreamIsCapturing", o + 205)
        t.call("cudaGraphLaunch", o + 210, [kernel("attn", o + 220, 100), ("kernel", "mlp", o + 320, 50, [4, 12, 1]),
                                            kernel("lm_head", o + 370, 50), kernel("memcpy32_post", o + 420, 2)])
        t.call("cudaLaunchKernel", o + 265, [kernel("glue", o + 430, 4)])  # in the round, in no child
        t.py("sglang_ddtree/tree/accept.py(20): greedy_accept_commit", o + 300, 200, r)
        t.call("cudaMemcpyAsync", o + 310, [("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", o + 440, 2)])
        t.call("cudaStreamSynchronize", o + 320, dur=125)
        t.py("sglang/srt/mem_cache/memory_pool.py(900): move_kv_cache", o + 510, 90, r)
        t.call("cudaMemsetAsync", o + 520, [("gpu_memset", "Memset (Device)", o + 530, 3)])
        t.call("cudaMemcpyAsync", o + 525, [("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", o + 540, 1)])
        t.py("torch/cuda/__init__.py(1152): synchronize", o + 610, 70, r)  # the largest GPU gap: 541..770
        t.call("cudaDeviceSynchronize", o + 620, dur=5)
        t.py("torch/cuda/streams.py(245): synchronize", o + 685, 10, r)
        t.call("cudaEventSynchronize", o + 690, dur=2)
        # Between rounds (after the last round too: outside the span, so not counted).
        t.py("sglang/srt/managers/scheduler.py(1300): process_batch_result", o + 750, 100, loop)
        t.call("cudaLaunchKernel", o + 760, [kernel("between", o + 770, 5)])
        t.call("cudaEventSynchronize", o + 800, dur=5)
    return t.dict()


def test_phase_gpu_times_launches_and_cpu_times_are_recovered_exactly():
    rep = at.analyze(ddtree_trace()["traceEvents"])
    assert rep["rounds"] == N and rep["round_cpu_us_median"] == 700 and rep["round_period_us_median"] == PERIOD
    assert list(rep["phases"]) == list(EXPECT)  # execution order, "(outside phases)" last
    for name, (cpu, gpu, ops, eager, graph) in EXPECT.items():
        row = rep["phases"][name]
        assert (row["cpu_us_per_round"], row["gpu_us_per_round"], row["kernels_per_round"],
                row["eager_launches_per_round"], row["graph_launches_per_round"]) == (cpu, gpu, ops, eager, graph), name
    assert rep["phases"]["_draft"]["calls_per_round"] == 1  # the prefill-like first round's _draft is not here
    assert rep["phases"]["_draft"]["functions"] == [f"{WORKER}:_draft"]
    assert "calls_per_round" not in rep["phases"][at.OUTSIDE_PHASES]
    # launched by the scheduler thread between rounds: 4 of the 5 fall between the first and the last round
    out = rep["outside_rounds"]
    assert (out["gpu_us_per_round"], out["kernels_per_round"], out["eager_launches_per_round"]) == (4.0, 0.8, 0.8)
    assert out["cpu_us_per_round"] == ((N - 1) * PERIOD + 700 - N * 700) / N
    assert rep["eager_launches_per_round"] == 7 and rep["graph_launches_per_round"] == 1
    # the graph's four ops (attn 100 + mlp 50 + lm_head 50 + memcpy32_post 2), not the eager draft kernels
    assert rep["graph_gpu_us_per_round"] == 202 and rep["phases"]["_verify"]["graph_gpu_us_per_round"] == 202
    assert rep["phases"]["_draft"]["graph_gpu_us_per_round"] == 0
    # which GPU ops take a phase's time, graph-replayed ones included, largest first
    top = rep["phases"]["_verify"]["top_kernels_us_per_round"]
    assert list(top.items())[:3] == [("attn", 100), ("mlp", 50), ("lm_head", 50)] and top["memcpy32_post"] == 2
    # launch grids where the trace has them (graph-replayed kernels have no input shapes)
    assert rep["phases"]["_verify"]["top_kernel_grids_per_round"] == {"mlp": {"4x12x1": 1.0}}
    assert "top_kernel_grids_per_round" not in rep["phases"]["_draft"]
    assert rep["gpu_ops_unlinked"] == 0
    # the existing keys keep their meaning
    assert rep["gpu_busy_us_per_round"] == (N * (BUSY - 5) + (N - 1) * 5) / N
    assert rep["gpu_ops_per_round"] == (N * 11 + N - 1) / N
    assert rep["loop_function"] == "sglang/srt/managers/scheduler.py:event_loop_overlap"


def test_gpu_time_beside_another_streams_work_is_counted_per_phase():
    quiet = at.analyze(ddtree_trace()["traceEvents"])
    assert all(row["gpu_overlapped_us_per_round"] == 0 for row in quiet["phases"].values())
    rep = at.analyze(ddtree_trace(side_stream=True)["traceEvents"])
    overlapped = {k: row["gpu_overlapped_us_per_round"] for k, row in rep["phases"].items()}
    # the verify graph's mlp ran 30 us beside the side copy, and the copy (launched in _draft) beside the mlp
    assert overlapped == {**{k: 0 for k in overlapped}, "_verify": 30.0, "_draft": 30.0}, overlapped


def test_overlap_of_an_interval_with_merged_intervals():
    merged = [[0.0, 10.0], [20.0, 30.0], [40.0, 45.0]]
    starts = [m[0] for m in merged]
    assert at._overlap(merged, starts, 5.0, 25.0) == 10.0  # 5..10 and 20..25
    assert at._overlap(merged, starts, 10.0, 20.0) == 0.0 and at._overlap(merged, starts, -5.0, 50.0) == 25.0
    assert at._overlap([], [], 0.0, 1.0) == 0.0


def test_gpu_idle_and_the_largest_gap_with_where_the_cpu_was():
    rep = at.analyze(ddtree_trace()["traceEvents"])
    assert rep["gpu_idle_us_per_round"] == PERIOD - BUSY
    assert rep["gpu_idle_gap_us_median"] == 770 - 541
    assert rep["gpu_idle_gap_cpu_phase"] == SYNC_CUDA  # same-named children are told apart by their file


def test_host_syncs_are_counted_in_their_phase():
    syncs = {(s["call"], s["phase"]): s["per_round"] for s in at.analyze(ddtree_trace()["traceEvents"])
             ["host_syncs_per_round"]}
    assert syncs == {
        ("cudaMemcpyAsync DtoH (Device -> Pinned)", "greedy_accept_commit"): 1.0,  # an HtoD copy is not one
        ("cudaStreamSynchronize", "greedy_accept_commit"): 1.0,
        ("cudaDeviceSynchronize", SYNC_CUDA): 1.0,
        ("cudaEventSynchronize", SYNC_STREAM): 1.0,
        ("cudaEventSynchronize", at.OUTSIDE_ROUNDS): (N - 1) / N,
    }


def test_correlation_alone_links_every_op():
    events = [e for e in ddtree_trace()["traceEvents"] if e.get("cat") != "ac2g"]
    for e in events:
        e.get("args", {}).pop("External id", None)
    rep = at.analyze(events)
    assert rep["phases"] == at.analyze(ddtree_trace()["traceEvents"])["phases"] and rep["gpu_ops_unlinked"] == 0


def test_flow_arrows_link_ops_when_correlation_args_are_missing():
    want = at.analyze(ddtree_trace()["traceEvents"])
    got = at.analyze(ddtree_trace("flow")["traceEvents"])
    assert got["phases"] == want["phases"] and got["host_syncs_per_round"] == want["host_syncs_per_round"]


def test_external_id_links_eager_ops_only():
    rep = at.analyze(ddtree_trace("external")["traceEvents"])
    assert rep["phases"]["_draft"]["gpu_us_per_round"] == 50
    assert rep["phases"]["move_kv_cache"]["kernels_per_round"] == 2
    assert rep["phases"]["_verify"]["gpu_us_per_round"] == 0  # graph kernels carry no External id
    assert rep["phases"]["_verify"]["graph_launches_per_round"] == 1  # counted from the call's name
    assert rep["gpu_ops_unlinked"] == 4 * N


def test_dflash_round_function_with_its_prefill_left_out():
    t = Trace()
    loop = t.py("sglang/srt/managers/scheduler.py(1050): event_loop_overlap", BASE - 100, 50_000)
    dflash = "sglang/srt/speculative/dflash_worker_v2.py(1366): forward_batch_generation"
    target = "sglang/srt/managers/tp_worker.py(400): forward_batch_generation"
    for i in range(N + 1):
        o = BASE + 2000 * i
        run = t.py("sglang/srt/managers/scheduler.py(1200): run_batch", o - 10, 9020 if i == 0 else 720, loop)
        if i == 0:  # the prefill: the same function, much longer
            r = t.py(dflash, o, 9000, run)
            t.py(target, o + 10, 8000, r)
            t.call("cudaLaunchKernel", o + 20, [kernel("prefill", o + 30, 7000)])
            continue
        o += 8000
        r = t.py(dflash, o, 700, run)
        t.py("sglang/srt/model_executor/model_runner.py(2000): forward", o + 10, 100, r)
        t.call("cudaGraphLaunch", o + 20, [kernel("draft_attn", o + 30, 40), kernel("draft_mlp", o + 70, 40)])
        t.py(f"{dflash.split('(')[0]}(1700): _greedy_sample_from_vocab_parallel_head", o + 120, 80, r)
        t.call("cudaLaunchKernel", o + 130, [kernel("argmax", o + 140, 5)])
        verify = t.py(target, o + 300, 300, r)  # the target verify: not a round function itself
        t.py("sglang/srt/model_executor/model_runner.py(2000): forward", o + 310, 200, verify)
        t.call("cudaGraphLaunch", o + 320, [kernel("target_attn", o + 330, 300)])
    rep = at.analyze(t.dict()["traceEvents"])
    assert rep["round_function"] == "sglang/srt/speculative/dflash_worker_v2.py:forward_batch_generation"
    assert rep["rounds"] == N and rep["round_period_us_median"] == 2000
    ph = rep["phases"]
    assert list(ph) == ["forward", "_greedy_sample_from_vocab_parallel_head", "forward_batch_generation",
                        at.OUTSIDE_PHASES]
    assert (ph["forward"]["gpu_us_per_round"], ph["forward"]["kernels_per_round"]) == (80, 2)
    assert (ph["forward_batch_generation"]["gpu_us_per_round"], ph["forward_batch_generation"]["cpu_us_per_round"],
            ph["forward_batch_generation"]["graph_launches_per_round"]) == (300, 300, 1)
    assert ph["_greedy_sample_from_vocab_parallel_head"]["eager_launches_per_round"] == 1
    assert rep["graph_launches_per_round"] == 2 and rep["eager_launches_per_round"] == 1
    assert rep["graph_gpu_us_per_round"] == 80 + 300  # the draft and target graphs, not the eager argmax
    assert rep["gpu_idle_us_per_round"] == 2000 - (80 + 5 + 300)


def test_plain_decoding_steps_are_rounds_and_a_speculative_target_forward_is_not():
    """Plain decoding's round is the target worker's forward_batch_generation (the scheduler calls it directly);
    inside a DFLASH round the same call is the target verify, not a round (the DFLASH test above)."""
    t = Trace()
    loop = t.py("sglang/srt/managers/scheduler.py(1050): event_loop_overlap", BASE - 100, 50_000)
    step = "sglang/srt/managers/tp_worker.py(400): forward_batch_generation"
    for i in range(N + 1):
        o = BASE + 1000 * i + (3000 if i else 0)
        run = t.py("sglang/srt/managers/scheduler.py(1200): run_batch", o - 10, 3020 if i == 0 else 420, loop)
        r = t.py(step, o, 3000 if i == 0 else 400, run)  # the first: a prefill, left out
        t.py("sglang/srt/model_executor/model_runner.py(2000): forward", o + 10, 200, r)
        t.call("cudaGraphLaunch", o + 20, [kernel("decode_attn", o + 30, 150)])
    rep = at.analyze(t.dict()["traceEvents"])
    assert rep["round_function"] == "sglang/srt/managers/tp_worker.py:forward_batch_generation"
    assert rep["rounds"] == N and rep["round_period_us_median"] == 1000
    assert rep["graph_gpu_us_per_round"] == 150 and rep["phases"]["forward"]["graph_launches_per_round"] == 1


def test_too_few_rounds_is_an_error_not_a_crash():
    t = Trace()
    t.py(f"{WORKER}(114): _decode_round", BASE, 700)
    assert "error" in at.analyze(t.dict()["traceEvents"])


@pytest.mark.parametrize("gz", [False, True])
def test_cli_reads_plain_and_gzip_traces_and_writes_json(tmp_path, gz, capsys):
    path = tmp_path / ("t.trace.json.gz" if gz else "t.trace.json")
    with (gzip.open if gz else open)(path, "wt") as f:
        json.dump(ddtree_trace(), f)
    out = tmp_path / "rep.json"
    assert at.main([str(path), "--json", str(out), "--min-us", "1"]) == 0
    printed = capsys.readouterr().out
    assert "GPU idle 723.0 us/round" in printed and "host syncs per round:" in printed
    table = printed.split("  phase ")[1].split("-- call tree")[0]
    assert "_verify" in table and at.OUTSIDE_PHASES in table and at.OUTSIDE_ROUNDS in table
    rep = json.loads(out.read_text())[str(path)]
    assert rep == json.loads(json.dumps(at.analyze(at.load(str(path)), 3, 1.0)))
    for key in ("round_function", "rounds", "round_cpu_us_median", "round_period_us_median", "gpu_busy_us_per_round",
                "gpu_ops_per_round", "span_us_per_round", "call_tree", "loop_function", "loop_tree"):
        assert key in rep


def test_runs_as_a_script(tmp_path):
    path = tmp_path / "t.trace.json"
    path.write_text(json.dumps(ddtree_trace()))
    res = subprocess.run([sys.executable, _PATH, str(path), "--json", str(tmp_path / "o.json")],
                         capture_output=True, text=True, check=True)
    assert "_decode_round: 5 rounds" in res.stdout and (tmp_path / "o.json").exists()
