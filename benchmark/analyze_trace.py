#!/usr/bin/env python3
"""Where a speculative decode round spends its time, from a torch-profiler trace of the scheduler.

Reads a Chrome trace (``*.trace.json[.gz]``) written by SGLang's profiler (``Engine.start_profile`` /
``stop_profile`` with ``activities=["CPU", "GPU"], with_stack=True``; ``bench_e2e.py --profile-dir`` records
one per configuration) and reports, for the decode rounds of the worker (DDTREE: ``_decode_round``; DFLASH /
EAGLE: ``forward_batch_generation`` of the spec-v2 worker; plain decoding: the target worker's
``forward_batch_generation``, one decode step; calls over 3x the median, prefills, are left out):
  - rounds, the median CPU time of one round's Python call, the median period between round starts
    (1 / rounds per second: what bounds throughput when the CPU is the bottleneck);
  - GPU busy time (union of kernel / memcpy / memset intervals) and kernels per round over the rounds' span;
  - phases: each direct child of the round function (``_draft``, ``build_tree``, ``_verify``, ...), keyed by
    its function name (qualified by its file where two children share one): CPU us and calls per round, and
    the device work it launched: GPU us (sum of durations), kernels (every GPU op: kernel, memcpy, memset),
    eager launches (cudaLaunchKernel*, cuLaunchKernel*, cudaMemcpy*, cudaMemset*) and CUDA-graph launches
    (cudaGraphLaunch; the graph's kernels are its GPU work), and the part of that GPU time during which another
    stream was busy too (``gpu_overlapped_us_per_round``: the same kernels run slower beside other work), the
    top GPU ops by time and their launch grids. ``(outside phases)`` is what the round launched
    outside any child (its CPU time is the round's self time); ``outside_rounds`` what the scheduler thread
    launched between the first and the last round's end outside every round (CPU: the wall time there);
  - GPU idle per round (the round period minus GPU busy, over the first to the last round start), the median
    of each round's largest idle gap, and the phase the scheduler thread was in most often at such a gap;
  - host syncs per round (cudaStream/Device/EventSynchronize, cudaMemcpy* of a device-to-host copy), by phase;
  - a call tree under the round: mean microseconds and calls per round for every Python function down to
    ``--depth`` levels (inclusive times), so two configurations can be compared line by line;
  - the same for the scheduler loop that calls the rounds (e.g. ``event_loop_overlap``), per round.

A GPU op belongs to the runtime / driver call that launched it through ``args.correlation`` (both carry it in
torch 2.11 traces; a graph's kernels all carry their cudaGraphLaunch's), else through the ``ac2g`` flow arrows
or the CPU op's ``External id``; a call belongs to the phase whose Python span holds it on the same thread.

    python benchmark/analyze_trace.py TRACE [TRACE ...] [--depth 3] [--min-us 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import re
import statistics
import sys
from collections import Counter, defaultdict

# A round is the outermost call of one of these (a speculative worker's target forward, nested in its round, is not
# one): DDTREE's round, DFLASH's / EAGLE's spec-v2 step, and plain decoding's target step (the scheduler calls the
# target worker directly when there is no speculative worker).
ROUND_FUNCS = ("sglang_ddtree/worker/worker.py", "_decode_round"), \
    ("speculative/dflash_worker_v2.py", "forward_batch_generation"), \
    ("speculative/eagle_worker_v2.py", "forward_batch_generation"), \
    ("managers/tp_worker.py", "forward_batch_generation")
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver"}
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")
EAGER_LAUNCHES = ("cudaLaunch", "cuLaunch", "cudaMemcpy", "cudaMemset", "cuMemcpy", "cuMemset")
HOST_SYNCS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
              "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize"}
OUTSIDE_PHASES, OUTSIDE_ROUNDS = "(outside phases)", "(outside rounds)"
TOP_KERNELS = 15  # GPU op names listed per phase
_ADDRESS = re.compile(r" of \S+ object at 0x[0-9a-fA-F]+| at 0x[0-9a-fA-F]+")


def load(path: str) -> list:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def _is_round(name: str) -> bool:
    return any(file in name and name.endswith(": " + func) for file, func in ROUND_FUNCS)


def _short(name: str) -> str:
    """'.../site-packages/sglang/srt/x/y.py(12): f' -> 'sglang/srt/x/y.py:f' (line numbers dropped so that
    the same function aggregates across call sites); '<built-in method view of Tensor object at 0x7f..>' ->
    '<built-in method view>' (the object's address dropped likewise)."""
    path, _, func = name.partition(": ")
    path = path.split("site-packages/")[-1].split("/python/")[-1]
    return f"{path.split('(')[0]}:{func}" if func else _ADDRESS.sub("", name)


def _union(intervals) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def _merged(intervals) -> list:
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _stream(op: dict):
    return op.get("args", {}).get("stream", op.get("tid"))


def _other_streams(events: list) -> dict:
    """stream -> (merged busy intervals of every OTHER stream's GPU ops, their starts): what could run beside
    that stream's ops."""
    by_stream = defaultdict(list)
    for e in events:
        if e.get("cat") in GPU_CATS and e.get("ph") == "X":
            by_stream[_stream(e)].append((e["ts"], e["ts"] + e.get("dur", 0.0)))
    out = {}
    for s in by_stream:
        merged = _merged([iv for t, ivs in by_stream.items() if t != s for iv in ivs])
        out[s] = (merged, [m[0] for m in merged])
    return out


def _overlap(merged: list, starts: list, a: float, b: float) -> float:
    """Length of [a, b] covered by ``merged`` (sorted, disjoint [start, end] lists; ``starts`` their starts)."""
    total, i = 0.0, max(0, bisect.bisect_right(starts, a) - 1)
    while i < len(merged) and merged[i][0] < b:
        total += max(0.0, min(b, merged[i][1]) - max(a, merged[i][0]))
        i += 1
    return total


def _launch_kind(name: str) -> str | None:
    """'graph' for a CUDA-graph launch, 'eager' for a kernel launch / memcpy / memset outside graphs."""
    if name.startswith(GRAPH_LAUNCHES):
        return "graph"
    if name.startswith(EAGER_LAUNCHES) and "HostFunc" not in name:
        return "eager"
    return None


def _is_dtoh(gpu_name: str) -> bool:  # torch names copies 'Memcpy DtoH (Device -> Pageable)' / '(Device -> Pinned)'
    return "DtoH" in gpu_name or "Device -> Pageable" in gpu_name or "Device -> Pinned" in gpu_name


def _launchers(events: list, runtime: list) -> list:
    """[(GPU op, the runtime / driver call that launched it, or None)]."""
    by_corr, by_pos, by_ext = {}, {}, defaultdict(list)
    for r in runtime:
        args = r.get("args", {})
        if args.get("correlation") is not None:
            by_corr[args["correlation"]] = r
        by_pos[(r.get("pid"), r.get("tid"), r["ts"])] = r
        if args.get("External id") is not None and _launch_kind(r["name"]):
            by_ext[args["External id"]].append(r)
    flow_src = {e.get("id"): (e.get("pid"), e.get("tid"), e.get("ts"))
                for e in events if e.get("cat") == "ac2g" and e.get("ph") == "s"}
    flow_dst = {(e.get("pid"), e.get("tid"), e.get("ts")): e.get("id")
                for e in events if e.get("cat") == "ac2g" and e.get("ph") == "f"}
    out = []
    for g in events:
        if g.get("cat") not in GPU_CATS or g.get("ph") != "X":
            continue
        args = g.get("args", {})
        r = by_corr.get(args.get("correlation"))
        if r is None:
            r = by_pos.get(flow_src.get(flow_dst.get((g.get("pid"), g.get("tid"), g["ts"]))))
        if r is None:
            before = [c for c in by_ext.get(args.get("External id"), ()) if c["ts"] <= g["ts"]]
            r = max(before, key=lambda c: c["ts"]) if before else None
        out.append((g, r))
    return out


def _phase_keys(decode: list, children: dict) -> dict:
    """Python name of a round's child -> its phase: the bare function name, or the short name where two
    children (of any round) share one."""
    names = {c["name"] for e in decode for c in children.get(e["args"]["Python id"], ())}
    bare = {n: n.partition(": ")[2] or _short(n) for n in names}
    shorts = defaultdict(set)
    for n in names:
        shorts[bare[n]].add(_short(n))
    return {n: bare[n] if len(shorts[bare[n]]) == 1 else _short(n) for n in names}


def _placer(rounds: list, decode: list, children: dict, keys: dict):
    """place(pid, tid, ts) -> the phase the scheduler thread was in at ts: a phase key, OUTSIDE_PHASES (in a
    decode round, in no child), OUTSIDE_ROUNDS (between the first round's start and the last one's end, in no
    round), or None (another thread, outside that span, or inside a round left out as a prefill)."""
    thread = (decode[0].get("pid"), decode[0].get("tid"))
    rounds = sorted(rounds, key=lambda e: e["ts"])
    starts = [e["ts"] for e in rounds]
    is_decode = {id(e) for e in decode}
    kids = []
    for e in rounds:
        cs = sorted(children.get(e["args"]["Python id"], ()), key=lambda c: c["ts"])
        kids.append(([c["ts"] for c in cs], [(c["ts"] + c["dur"], keys.get(c["name"])) for c in cs]))
    t0, t1 = decode[0]["ts"], decode[-1]["ts"] + decode[-1]["dur"]

    def place(pid, tid, ts):
        if (pid, tid) != thread:
            return None
        i = bisect.bisect_right(starts, ts) - 1
        if i >= 0 and ts <= rounds[i]["ts"] + rounds[i]["dur"]:
            if id(rounds[i]) not in is_decode:
                return None
            kid_starts, kid_ends = kids[i]
            j = bisect.bisect_right(kid_starts, ts) - 1
            return kid_ends[j][1] if j >= 0 and ts <= kid_ends[j][0] else OUTSIDE_PHASES
        return OUTSIDE_ROUNDS if t0 <= ts <= t1 else None

    return place


def _gaps(busy: list, ends: list, a: float, b: float) -> list:
    """Idle stretches (start, end) of [a, b] between the merged, sorted busy intervals."""
    gaps, cur = [], a
    for s, e in busy[bisect.bisect_right(ends, a):]:
        if s >= b:
            break
        if s > cur:
            gaps.append((cur, s))
        cur = max(cur, e)
    if cur < b:
        gaps.append((cur, b))
    return gaps


def _idle(gpu: list, starts: list, place, thread) -> dict:
    """GPU idle time per round period (first to last round start), each period's largest idle gap (median),
    and the phase the scheduler thread was in at the middle of those gaps (most common)."""
    busy = _merged(gpu)
    ends = [e for _, e in busy]
    idle, largest, where = 0.0, [], Counter()
    for a, b in zip(starts, starts[1:]):
        gaps = _gaps(busy, ends, a, b)
        idle += sum(e - s for s, e in gaps)
        s, e = max(gaps, key=lambda g: g[1] - g[0], default=(a, a))
        largest.append(e - s)
        if e > s:
            where[place(*thread, (s + e) / 2)] += 1
    periods = max(len(starts) - 1, 1)
    return {"gpu_idle_us_per_round": round(idle / periods, 1),
            "gpu_idle_gap_us_median": round(statistics.median(largest), 1) if largest else None,
            "gpu_idle_gap_cpu_phase": where.most_common(1)[0][0] if where else None}


def _phases(events, rounds, decode, children, t0, t1) -> dict:
    """The per-phase launch attribution: phases, outside_rounds, launches and host syncs per round."""
    n = len(decode)
    keys = _phase_keys(decode, children)
    place = _placer(rounds, decode, children, keys)
    sums = {}

    def row(key):
        return sums.setdefault(key, {"functions": set(), "cpu": 0.0, "calls": 0, "gpu": 0.0, "ops": 0,
                                     "eager": 0, "graph": 0, "graph_gpu": 0.0, "overlapped": 0.0})

    self_cpu = 0.0
    for e in decode:
        kids = children.get(e["args"]["Python id"], ())
        for c in sorted(kids, key=lambda c: c["ts"]):
            r = row(keys[c["name"]])
            r["functions"].add(_short(c["name"]))
            r["cpu"] += c["dur"]
            r["calls"] += 1
        self_cpu += e["dur"] - sum(c["dur"] for c in kids)
    row(OUTSIDE_PHASES)["cpu"] = self_cpu
    row(OUTSIDE_ROUNDS)["cpu"] = (t1 - t0) - sum(e["dur"] for e in decode)

    runtime = [e for e in events if e.get("cat") in RUNTIME_CATS and e.get("ph") == "X"]
    where = {id(r): place(r.get("pid"), r.get("tid"), r["ts"]) for r in runtime}
    launched = defaultdict(list)
    kernels = defaultdict(Counter)  # phase -> GPU op name -> summed duration (graph-replayed ops included)
    grids = defaultdict(Counter)  # (phase, GPU op name) -> launch grid ("XxYxZ", as the trace records it) -> count
    unlinked = 0
    # GPU time of each phase's ops during which another stream was busy too: the same kernels run slower beside
    # other work (session 18: DDTREE's verify GEMMs 7-11 % slower than DFLASH's, same tiles, same run)
    others = _other_streams(events)
    for g, r in _launchers(events, runtime):
        if r is None:
            unlinked += 1
            continue
        launched[id(r)].append(g)
        if where[id(r)] is not None:
            sums[where[id(r)]]["gpu"] += g.get("dur", 0.0)
            sums[where[id(r)]]["ops"] += 1
            sums[where[id(r)]]["overlapped"] += _overlap(*others.get(_stream(g), ([], [])), g["ts"],
                                                         g["ts"] + g.get("dur", 0.0))
            kernels[where[id(r)]][g.get("name", "?")[:120]] += g.get("dur", 0.0)
            grid = g.get("args", {}).get("grid")
            if grid:
                grids[where[id(r)], g.get("name", "?")[:120]]["x".join(str(v) for v in grid)] += 1
            if _launch_kind(r["name"]) == "graph":
                sums[where[id(r)]]["graph_gpu"] += g.get("dur", 0.0)
    syncs = Counter()
    for r in runtime:
        key = where[id(r)]
        if key is None:
            continue
        kind = _launch_kind(r["name"])
        if kind:
            sums[key][kind] += 1
        if r["name"].split("_")[0] in HOST_SYNCS:
            syncs[(r["name"], key)] += 1
        elif r["name"].startswith(("cudaMemcpy", "cuMemcpy")):
            dtoh = [g["name"] for g in launched[id(r)] if g.get("cat") == "gpu_memcpy" and _is_dtoh(g["name"])]
            if dtoh or "DtoH" in r["name"]:
                syncs[(f"{r['name']} {dtoh[0].removeprefix('Memcpy ')}" if dtoh else r["name"], key)] += 1

    def out(s, calls=True):
        return {**({"functions": sorted(s["functions"])} if s["functions"] else {}),
                "cpu_us_per_round": round(s["cpu"] / n, 1),
                **({"calls_per_round": round(s["calls"] / n, 2)} if calls else {}),
                "gpu_us_per_round": round(s["gpu"] / n, 1), "graph_gpu_us_per_round": round(s["graph_gpu"] / n, 1),
                "gpu_overlapped_us_per_round": round(s["overlapped"] / n, 1),
                "kernels_per_round": round(s["ops"] / n, 2),
                "eager_launches_per_round": round(s["eager"] / n, 2),
                "graph_launches_per_round": round(s["graph"] / n, 2)}

    outside_rounds = sums.pop(OUTSIDE_ROUNDS)
    outside_phases = sums.pop(OUTSIDE_PHASES)
    phases = {k: out(s) for k, s in sums.items()}
    for k, row_ in phases.items():
        if kernels.get(k):  # the GPU ops that take the phase's time, largest first (TOP_KERNELS of them)
            row_["top_kernels_us_per_round"] = {name: round(us / n, 1)
                                               for name, us in kernels[k].most_common(TOP_KERNELS)}
            # their launch grids per round: a graph-replayed kernel has no CPU op with input shapes, and its grid
            # is what tells two runs' row counts apart (session 18: the same GEMMs 10 % slower in one graph)
            seen = {name: {g: round(c / n, 2) for g, c in grids[k, name].most_common(4)}
                    for name in row_["top_kernels_us_per_round"] if grids.get((k, name))}
            if seen:
                row_["top_kernel_grids_per_round"] = seen
    phases[OUTSIDE_PHASES] = out(outside_phases, calls=False)
    in_rounds = list(sums.values()) + [outside_phases]
    return {
        "phases": phases, "outside_rounds": out(outside_rounds, calls=False),
        "eager_launches_per_round": round(sum(s["eager"] for s in in_rounds) / n, 2),
        "graph_launches_per_round": round(sum(s["graph"] for s in in_rounds) / n, 2),
        # GPU time of the work replayed by CUDA graphs inside the rounds: the forwards (draft + verify)
        "graph_gpu_us_per_round": round(sum(s["graph_gpu"] for s in in_rounds) / n, 1),
        "host_syncs_per_round": [{"call": c, "phase": p, "per_round": round(k / n, 2)}
                                 for (c, p), k in sorted(syncs.items(), key=lambda kv: -kv[1])],
        "gpu_ops_unlinked": unlinked,
    }, place
def analyze(events: list, depth: int = 3, min_us: float = 5.0) -> dict:
    py = [e for e in events if e.get("cat") == "python_function" and e.get("ph") == "X"]
    by_id = {e["args"].get("Python id"): e for e in py if "args" in e}
    children = defaultdict(list)
    for e in py:
        parent = e.get("args", {}).get("Python parent id")
        if parent is not None:
            children[parent].append(e)
    rounds = [e for e in py if _is_round(e["name"])]
    # outermost only (DDTREE's forward_batch_generation is not a round function; _decode_round is)
    round_ids = {e["args"]["Python id"] for e in rounds}

    def has_round_ancestor(e):
        parent = e["args"].get("Python parent id")
        while parent is not None:
            if parent in round_ids:
                return True
            parent = by_id.get(parent, {}).get("args", {}).get("Python parent id")
        return False

    rounds = sorted((e for e in rounds if not has_round_ancestor(e)), key=lambda e: e["ts"])
    if len(rounds) < 3:
        return {"error": f"only {len(rounds)} decode rounds found in the trace"}
    # the first call may be a prefill (same function for DFLASH): drop calls much longer than the median
    med = statistics.median(e["dur"] for e in rounds)
    decode = [e for e in rounds if e["dur"] <= 3 * med]
    starts = [e["ts"] for e in decode]
    periods = [b - a for a, b in zip(starts, starts[1:])]
    t0, t1 = decode[0]["ts"], decode[-1]["ts"] + decode[-1]["dur"]
    gpu = [(e["ts"], e["ts"] + e["dur"]) for e in events
           if e.get("cat") in GPU_CATS and e.get("ph") == "X" and t0 <= e["ts"] <= t1]
    n = len(decode)
    tree = defaultdict(lambda: [0.0, 0])

    def walk(e, path, level):
        for c in children.get(e["args"]["Python id"], ()):
            key = path + (_short(c["name"]),)
            tree[key][0] += c["dur"]
            tree[key][1] += 1
            if level < depth:
                walk(c, key, level + 1)

    for e in decode:
        walk(e, (), 1)
    rows = [{"path": list(k), "us_per_round": round(v[0] / n, 1), "calls_per_round": round(v[1] / n, 2)}
            for k, v in tree.items() if v[0] / n >= min_us]
    rows.sort(key=lambda r: r["path"])

    # The scheduler loop around the rounds: the first ancestor of a round that outlives the rounds' span
    # (e.g. event_loop_overlap); its children between the first and the last round, per round.
    loop, cur = None, decode[-1]
    while cur is not None:
        parent = by_id.get(cur["args"].get("Python parent id"))
        if parent is not None and parent["ts"] <= t0 and parent["ts"] + parent["dur"] >= t1:
            loop = parent
            break
        cur = parent
    loop_rows = []
    if loop is not None:
        tree.clear()
        inside = [c for c in children.get(loop["args"]["Python id"], ()) if t0 <= c["ts"] < t1]
        for c in inside:
            key = (_short(c["name"]),)
            tree[key][0] += c["dur"]
            tree[key][1] += 1
            walk(c, key, 2)
        loop_rows = [{"path": list(k), "us_per_round": round(v[0] / n, 1), "calls_per_round": round(v[1] / n, 2)}
                     for k, v in tree.items() if v[0] / n >= min_us]
        loop_rows.sort(key=lambda r: r["path"])
    attribution, place = _phases(events, rounds, decode, children, t0, t1)
    gpu_all = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in GPU_CATS and e.get("ph") == "X"]
    idle = _idle(gpu_all, starts, place, (decode[0].get("pid"), decode[0].get("tid")))
    return {
        "round_function": _short(decode[0]["name"]), "rounds": n,
        "round_cpu_us_median": round(statistics.median(e["dur"] for e in decode), 1),
        "round_period_us_median": round(statistics.median(periods), 1) if periods else None,
        "gpu_busy_us_per_round": round(_union(gpu) / n, 1), "gpu_ops_per_round": round(len(gpu) / n, 1),
        "span_us_per_round": round((t1 - t0) / n, 1),
        "call_tree": rows,
        "loop_function": _short(loop["name"]) if loop is not None else None, "loop_tree": loop_rows,
        **idle, **attribution,
    }


def _print(name: str, rep: dict, min_us: float = 5.0) -> None:
    print(f"== {name}")
    if "error" in rep:
        print("  " + rep["error"])
        return
    print(f"  {rep['round_function']}: {rep['rounds']} rounds; CPU per round (median) {rep['round_cpu_us_median']} us;"
          f" period {rep['round_period_us_median']} us; GPU busy {rep['gpu_busy_us_per_round']} us/round,"
          f" {rep['gpu_ops_per_round']} GPU ops/round; span {rep['span_us_per_round']} us/round")
    _print_phases(rep, min_us)
    print("  -- call tree, per round:")
    for r in rep["call_tree"]:
        print(f"  {'  ' * (len(r['path']) - 1)}{r['path'][-1]:<70} {r['us_per_round']:>9.1f} us"
              f" x{r['calls_per_round']:g}")
    if rep.get("loop_function"):
        print(f"  -- scheduler loop {rep['loop_function']}, per round:")
        for r in rep["loop_tree"]:
            print(f"  {'  ' * (len(r['path']) - 1)}{r['path'][-1]:<70} {r['us_per_round']:>9.1f} us"
                  f" x{r['calls_per_round']:g}")


def _print_phases(rep: dict, min_us: float = 5.0) -> None:
    print(f"  GPU idle {rep['gpu_idle_us_per_round']} us/round (largest gap per round, median:"
          f" {rep['gpu_idle_gap_us_median']} us, CPU then in {rep['gpu_idle_gap_cpu_phase']});"
          f" launches per round: {rep['eager_launches_per_round']:g} eager, {rep['graph_launches_per_round']:g}"
          f" graph; {rep['gpu_ops_unlinked']} GPU ops with no launching call found")
    syncs = "; ".join(f"{s['call']} x{s['per_round']:g} in {s['phase']}" for s in rep["host_syncs_per_round"])
    print(f"  host syncs per round: {syncs or 'none'}  (beside: GPU us while another stream was busy too)")
    print(f"  {'phase':<48} {'CPU us':>9} {'calls':>6} {'GPU us':>9} {'beside':>7} {'kernels':>8} {'eager':>7}"
          f" {'graph':>6}")
    rows = list(rep["phases"].items()) + [(OUTSIDE_ROUNDS, rep["outside_rounds"])]
    hidden = 0
    for name, r in rows:
        if max(r["cpu_us_per_round"], r["gpu_us_per_round"]) < min_us and not r["kernels_per_round"]:
            hidden += 1
            continue
        calls = f"{r['calls_per_round']:g}" if "calls_per_round" in r else "-"
        print(f"  {name[:48]:<48} {r['cpu_us_per_round']:>9.1f} {calls:>6} {r['gpu_us_per_round']:>9.1f}"
              f" {r['gpu_overlapped_us_per_round']:>7.1f} {r['kernels_per_round']:>8g}"
              f" {r['eager_launches_per_round']:>7g}"
              f" {r['graph_launches_per_round']:>6g}")
    if hidden:
        print(f"  ({hidden} phases under {min_us:g} us and launching nothing not shown)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--min-us", type=float, default=5.0, help="hide call-tree lines below this per round")
    ap.add_argument("--json", help="write the reports here")
    args = ap.parse_args(argv)
    reports = {}
    for path in args.traces:
        reports[path] = analyze(load(path), args.depth, args.min_us)
        _print(path, reports[path], args.min_us)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
