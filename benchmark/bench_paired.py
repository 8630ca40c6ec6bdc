#!/usr/bin/env python3
"""Paired decode benchmark: every configuration's engine alive at once, timed in alternation.

``bench_e2e.py`` starts one engine after another, so machine drift between configurations (a busy
neighbour, clocks, the Python heap) lands in the comparison; at batch 1 on a small target a round is
CPU-bound and such drift is as large as the differences we look for. Here one ``sglang.Engine`` per
configuration runs in its own child process (``--serve``), all on the same GPU, and the parent times
them in turn: repetition r runs every configuration on the same prompts, in an order rotated by r, for
each batch size. Before them, ``--warmup-repeats`` untimed repetitions (default 1) run every configuration at
every batch size on the same prompts: the first decode at a batch size pays one-time costs (Triton kernels
specialised on a new batch size or length: session 25's first repetition ran DDTREE and DFLASH at about half
the second's speed at bs 16 / 48 on the tiny pair, plain decoding not). Reported per configuration and batch
size: tokens/s of every timed repetition, the median,
the paired ratio against each baseline (per-repetition ratios: median, min, max), mean accept length
and token equality with the first plain-decoding config (``plain``, ``plain+fa3``, ...; ``plain_reference``).

``--schedule``: ``waves`` (default, as every session before 36) generates the prompts in consecutive batches of
``bs`` and waits for each whole batch; ``continuous`` keeps ``bs`` requests in flight, each finished one replaced
at once (a server under a steady load of ``bs``). A speculative engine's requests finish after different numbers
of rounds, so in waves each batch runs down to its slowest request at a shrinking batch size; plain decoding has
no such tail (session 36: b63 on the tiny pair at bs 16 ran ~29 rounds a wave where its mean request needed ~20).
That holds only while every request asks the same number of tokens: then plain decoding's requests all finish on
the same step, and under ``continuous`` their slots are refilled and prefilled together, while a speculative
engine's are refilled one by one. ``--length-spread F`` gives each prompt its own length, up to +-F of
``--max-new-tokens`` (the same for every config and repetition: ``bench_e2e.request_params``), as a server's requests
have. Each timed cell also reports the engine's prefill batches (``prefill_batches``, per repetition: the
``Prefill batch`` lines its log holds between the parent's cell markers): session 41 found that the spread's cost falls
on plain decoding through them (its lockstep batch refills in one prefill; spread arrivals come one at a time, each
pausing the batch), 114 against 896 in one run, while a speculative engine's stayed ~640 either way.

    python benchmark/bench_paired.py --target T --draft D --out benchmark/results/paired.json \
        --configs plain,dflash,ddtree:64:8 [--bs 1,16] [--repeats 5] [--baselines dflash,plain]
Config specs as in ``bench_e2e.py`` (``plain`` | ``dflash`` | ``ddtree:<budget>:<topk>``, optionally
``+nograph`` / ``+nooverlap``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_e2e import (PROMPTS, SCHEDULES, after_warmup, engine_caps, engine_env, engine_kwargs,  # noqa: E402
                       environment, fa3_unavailable, plain_reference, request_params)

_TAG = "@@BENCH_PAIRED "
# The parent's marker in an engine's log before each command: what the log holds until the next one is that cell's
# (the engine's scheduler logs to the same file: stderr, one shared offset)
_CELL = "[bench_paired] cell "
_PREFILL = "Prefill batch"  # SGLang's scheduler logs one such line per prefill batch (INFO)


class _FakeEngine:
    """TEST ONLY (``BENCH_PAIRED_FAKE_ENGINE=1``): lets the CPU test run the orchestration end to end (both
    schedules: ``generate`` for waves, ``loop`` + ``async_generate`` for continuous)."""

    def __init__(self, spec):
        self.accept = None if spec.startswith("plain") else 2.0
        # BENCH_PAIRED_FAKE_FIRST_CALL_S: the first generate at each batch size takes this much longer (a
        # one-time compile), which the untimed warm-up must absorb
        self.first_call_s = float(os.environ.get("BENCH_PAIRED_FAKE_FIRST_CALL_S", "0"))
        self.seen_bs = set()

    def generate(self, input_ids, sampling_params):
        if len(input_ids) not in self.seen_bs:
            self.seen_bs.add(len(input_ids))
            time.sleep(self.first_call_s)
        time.sleep(0.001 * len(input_ids))
        print(f"{_PREFILL}, #new-seq: {len(input_ids)} (fake)", file=sys.stderr, flush=True)  # a wave: one prefill
        per = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(input_ids)
        return [self._answer(ids, p) for ids, p in zip(input_ids, per)]

    def _answer(self, ids, sampling_params):
        return {"output_ids": list(ids[:2]) + [7] * (sampling_params["max_new_tokens"] - 2),
                "meta_info": {"spec_accept_length": self.accept}}

    @property
    def loop(self):
        import asyncio

        if getattr(self, "_loop", None) is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    async def async_generate(self, input_ids, sampling_params):
        import asyncio

        await asyncio.sleep(0.001)
        print(f"{_PREFILL}, #new-seq: 1 (fake)", file=sys.stderr, flush=True)  # each arrival alone
        return self._answer(input_ids, sampling_params)

    def shutdown(self):
        pass

    def freeze_gc(self):  # +gcfreeze
        pass


def serve(args) -> int:
    """Child: one engine; reads one JSON command per stdin line, answers one ``_TAG`` line each."""
    # sleep_on_idle: the other configs' engines stay alive while this one is timed; idle, each would poll its
    # sockets in a busy loop (one CPU core each) next to the CPU-bound round being measured
    kw = {**engine_caps(args.bs.split(",")), "mem_fraction_static": args.mem_fraction, "port": args.port,
          "nccl_port": args.port + 7, "sleep_on_idle": True,
          **engine_kwargs(args.serve, args.draft, args.attention_backend)}
    if os.environ.get("BENCH_PAIRED_FAKE_ENGINE") == "1":
        engine = _FakeEngine(args.serve)
    else:
        import sglang

        engine = sglang.Engine(model_path=args.target, **kw)
    params = dict(temperature=0.0, max_new_tokens=args.max_new_tokens, ignore_eos=True)
    engine.generate(input_ids=[[1, 2, 3]] * 2, sampling_params=dict(params, max_new_tokens=16))  # warm-up
    after_warmup(engine, args.serve)
    # the graph cap it was started with: the parent records it per engine (bench_e2e.engine_caps)
    print(_TAG + json.dumps({"ready": True, "cuda_graph_max_bs_decode": kw["cuda_graph_max_bs_decode"]}), flush=True)
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd.get("quit"):
                break
            decode = SCHEDULES[cmd.get("schedule", "waves")]
            per = request_params(params, len(cmd["prompts"]), args.length_spread)
            print(_TAG + json.dumps(decode(engine, cmd["prompts"], cmd["bs"], per)), flush=True)
    finally:
        engine.shutdown()
    return 0


class _Child:
    def __init__(self, spec, args, index, log_dir):
        cmd = [sys.executable, os.path.abspath(__file__), "--serve", spec, "--target", args.target, "--draft",
               args.draft, "--attention-backend", args.attention_backend, "--max-new-tokens",
               str(args.max_new_tokens), "--length-spread", str(args.length_spread), "--mem-fraction",
               str(args.mem_fraction), "--bs", args.bs,
               "--port", str(args.base_port + 100 * index), "--out", "-"]
        self.spec = spec
        self.log = open(os.path.join(log_dir, f"engine_{index}.log"), "w")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, bufsize=1, env={**os.environ, **engine_env(spec)})

    def read(self, timeout_s: float) -> dict:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.spec}: engine process exited (rc {self.proc.poll()}); see {self.log.name}")
            if line.startswith(_TAG):
                return json.loads(line[len(_TAG):])
            self.log.write(line)
        raise TimeoutError(f"{self.spec}: no answer within {timeout_s} s")

    def ask(self, cmd: dict, timeout_s: float = 600, cell=None) -> dict:
        """``cell``: a label written to the engine's log first (``_CELL``), so its lines can be told apart per cell."""
        if cell is not None:
            self.log.write(_CELL + json.dumps(cell) + "\n")
            self.log.flush()
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.read(timeout_s)

    def close(self):
        try:
            self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)
        except Exception:  # already gone, or stuck: make sure it ends
            self.proc.kill()
        self.log.close()


def prefill_batches(log_path: str) -> dict:
    """{(bs, rep): the ``_PREFILL`` lines after that cell's marker and before the next} of one engine's log."""
    counts, cell = {}, None
    with open(log_path, errors="replace") as f:
        for line in f:
            if line.startswith(_CELL):
                label = json.loads(line[len(_CELL):])
                cell = (str(label["bs"]), label["rep"])
                counts[cell] = 0
            elif cell is not None and _PREFILL in line:
                counts[cell] += 1
    return counts


def _stats(values):
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4), "max": round(max(values), 4)}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--configs", default="plain,dflash,ddtree:64:8")
    ap.add_argument("--baselines", default="dflash,plain", help="paired ratios against these configs")
    ap.add_argument("--bs", default="1,16", help="comma-separated batch sizes")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup-repeats", type=int, default=1,
                    help="untimed repetitions (every config at every batch size) before the timed ones")
    ap.add_argument("--num-prompts", type=int, default=16, help="prompts per batch size and repetition")
    ap.add_argument("--schedule", choices=sorted(SCHEDULES), default="waves",
                    help="waves: consecutive batches of bs, each waited for; continuous: bs requests in flight, "
                         "each finished one replaced at once (module docstring)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--length-spread", type=float, default=0.0,
                    help="vary each request's max_new_tokens by up to +-this fraction, fixed per prompt (the same in "
                         "every config and repetition), in [0, 1); 0: every request asks --max-new-tokens")
    ap.add_argument("--attention-backend", default="triton")
    ap.add_argument("--mem-fraction", type=float, default=0.1, help="mem_fraction_static of EACH engine")
    ap.add_argument("--base-port", type=int, default=31000)
    ap.add_argument("--log-dir", default=None, help="engine logs (default: next to --out)")
    ap.add_argument("--deadline-s", type=float, default=0,
                    help="start no repetition after this many seconds from the engines' launch (0: no limit); "
                         "--out is rewritten after every repetition either way")
    ap.add_argument("--out", required=True)
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=31000, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        return serve(args)

    configs = args.configs.split(",")
    for spec in configs:
        engine_kwargs(spec, args.draft, args.attention_backend)  # bad specs fail here, before any engine
    baselines = [b for b in args.baselines.split(",") if b]
    missing = [b for b in baselines if b not in configs]
    if missing:
        ap.error(f"--baselines {missing} are not in --configs {configs}")
    why = None if os.environ.get("BENCH_PAIRED_FAKE_ENGINE") == "1" else fa3_unavailable(configs,
                                                                                         args.attention_backend)
    if why:
        print(f"bench_paired: error: {why}", file=sys.stderr)
        return 1
    if args.warmup_repeats < 0:
        ap.error(f"--warmup-repeats {args.warmup_repeats}: must be >= 0")
    if not 0.0 <= args.length_spread < 1.0:
        ap.error(f"--length-spread {args.length_spread}: must be in [0, 1)")
    bs_list = [int(b) for b in args.bs.split(",")]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.target)
    prompts = [tok.encode(PROMPTS[i % len(PROMPTS)]) for i in range(args.num_prompts)]
    log_dir = args.log_dir or os.path.dirname(os.path.abspath(args.out))
    os.makedirs(log_dir, exist_ok=True)
    report = {"environment": environment(argv),
              "settings": {**engine_caps(bs_list), "mem_fraction_static": args.mem_fraction, "sleep_on_idle": True,
                           "attention_backend": args.attention_backend,
                           "max_new_tokens": args.max_new_tokens, "length_spread": args.length_spread,
                           "num_prompts": args.num_prompts, "greedy": True,
                           "repeats": args.repeats, "warmup_repeats": args.warmup_repeats, "schedule": args.schedule,
                           "target": args.target, "draft": args.draft,
                           "method": "one engine process per config, all alive; each repetition runs every config "
                                     "on the same prompts in a rotated order"},
              "results": {}}
    t0 = time.time()
    children = []
    runs = {spec: {str(bs): [] for bs in bs_list} for spec in configs}
    try:
        for i, spec in enumerate(configs):
            children.append(_Child(spec, args, i, log_dir))
            time.sleep(3)  # staggered starts
        for c in children:
            ready = c.read(timeout_s=400)
            report.setdefault("engines_cuda_graph_max_bs_decode", {})[c.spec] = ready.get("cuda_graph_max_bs_decode")
            print(f"[bench_paired] {c.spec} ready ({time.time() - t0:.0f} s)", flush=True)
        report["engines_ready_s"] = round(time.time() - t0, 1)
        for _ in range(args.warmup_repeats):  # untimed: the one-time costs of each batch size (module docstring)
            for bs in bs_list:
                for c in children:
                    c.ask({"bs": bs, "prompts": prompts, "schedule": args.schedule}, cell={"bs": bs, "rep": "warmup"})
        if args.warmup_repeats:
            report["warmup_s"] = round(time.time() - t0 - report["engines_ready_s"], 1)
            print(f"[bench_paired] warm-up ({args.warmup_repeats} untimed repetition(s)) done "
                  f"({time.time() - t0:.0f} s)", flush=True)
        for rep in range(args.repeats):
            if args.deadline_s and rep and time.time() - t0 > args.deadline_s:
                print(f"[bench_paired] --deadline-s {args.deadline_s} passed: stopping after {rep} repetitions",
                      flush=True)
                break
            for bs in bs_list:
                order = configs[rep % len(configs):] + configs[: rep % len(configs)]
                for c in sorted(children, key=lambda c: order.index(c.spec)):
                    res = c.ask({"bs": bs, "prompts": prompts, "schedule": args.schedule}, cell={"bs": bs, "rep": rep})
                    runs[c.spec][str(bs)].append(res)
            print(f"[bench_paired] repetition {rep + 1}/{args.repeats} done ({time.time() - t0:.0f} s)", flush=True)
            _write(report, runs, bs_list, baselines, t0, args.out, final=False)
    finally:
        for c in children:
            c.close()
    for c in children:  # each timed cell's prefill batches, from its engine's log
        counts = prefill_batches(c.log.name)
        for bs, results in runs[c.spec].items():
            for rep, res in enumerate(results):
                res["prefill_batches"] = counts.get((bs, rep))
    _write(report, runs, bs_list, baselines, t0, args.out, final=True)
    return 0


def _write(report, runs, bs_list, baselines, t0, out, final) -> None:
    """Summarise the repetitions done so far (``runs[config][bs]``) into ``out`` (after each one, so a run cut
    short by its time limit still leaves every finished repetition; ``repetitions_done`` says how many)."""
    done = {bs: min(len(by_bs[bs]) for by_bs in runs.values()) for bs in map(str, bs_list)}  # every config ran
    report["repetitions_done"] = min(done.values())
    report["complete"] = bool(final and report["repetitions_done"] == report["settings"]["repeats"])
    report["results"] = {}
    for spec in runs:
        rec = report["results"][spec] = {}
        for bs in map(str, bs_list):
            n = done[bs]
            rs = runs[spec][bs][:n]
            if not rs:
                continue
            tps = [r["tokens"] / r["wall_s"] for r in rs]
            m = rec[bs] = {"output_tokens": rs[0]["tokens"],  # a cell's generated tokens (every repetition's)
                           "tokens_per_s": [round(x, 1) for x in tps], "tokens_per_s_median": round(statistics.median(tps), 1),
                           "mean_accept_length": rs[0]["mean_accept_length"] and round(rs[0]["mean_accept_length"], 3)}
            if any("prefill_batches" in r for r in rs):  # the final write: counted from the engine's log
                m["prefill_batches"] = [r.get("prefill_batches") for r in rs]
            ref_spec = plain_reference(list(runs))
            if ref_spec is not None:
                ref = runs[ref_spec][bs][0]["outputs"]
                m["equal_to_plain"] = f"{sum(a == b for a, b in zip(rs[0]['outputs'], ref))}/{len(ref)}"
            for base in baselines:
                if base != spec:
                    ratios = [x / (b["tokens"] / b["wall_s"]) for x, b in zip(tps, runs[base][bs][:n])]
                    m[f"speedup_vs_{base}"] = _stats(ratios)
            if final:
                print(f"[bench_paired] {spec:>22} bs {bs:>3}: median {m['tokens_per_s_median']:>8.1f} tok/s "
                      f"(runs {m['tokens_per_s']}), accept {m['mean_accept_length']}, == plain {m.get('equal_to_plain')}, "
                      f"prefills {m.get('prefill_batches')}, "
                      + ", ".join(f"vs {b} x{m[f'speedup_vs_{b}']['median']:.3f} [{m[f'speedup_vs_{b}']['min']:.3f}, "
                                  f"{m[f'speedup_vs_{b}']['max']:.3f}]" for b in baselines if f"speedup_vs_{b}" in m),
                      flush=True)
    report["wall_s"] = round(time.time() - t0, 1)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1)
    os.replace(tmp, out)


if __name__ == "__main__":
    sys.exit(main())
