#!/usr/bin/env python3
"""End-to-end decode benchmark in one run: autoregressive vs DFLASH vs DDTREE on the same engine settings.

One ``sglang.Engine`` per configuration, started one after another in this process (SGLang spawns its
scheduler, so run this file as a script). For every configuration and batch size it decodes the same
greedy prompts (``ignore_eos``), records output tokens per second (wall clock of ``generate``, short
prompts, so decode dominates), the mean accept length reported in ``meta_info``, and whether every
output equals the autoregressive configuration's output token for token. Writes one JSON file with the
GPU, versions and the exact command.

    python benchmark/bench_e2e.py --target T --draft D --out benchmark/results/e2e.json \
        --configs plain,dflash,ddtree:16:4,ddtree:64:8 [--bs 1,16] [--attention-backend triton]
Config specs: ``plain`` | ``dflash`` | ``ddtree:<budget>:<topk>`` (budget an integer or ``auto``), optionally
``+nograph`` / ``+nooverlap``, an attention backend (``+fa3`` ...), ``+gcfreeze`` (freeze the engine's garbage
collector after warm-up), ``+gclog`` (log every collection of the scheduler with its duration, INFO level:
``benchmark/gc_log_summary.py`` totals them), ``+kvgraph`` / ``+kveager`` (DDTREE's draft-KV append from CUDA
graphs / as upstream's eager call, the default), ``+fiplan`` (flashinfer: DDTREE's host-sync-free plan of its graph
replays, ``SGLANG_DDTREE_FLASHINFER_PLAN=1``: the default with FlashInfer 0.6.14) / ``+fiupstream`` (upstream's
``plan()``, ``=0``).
``--profile-dir D`` also records one torch-profiler trace per configuration under D, of ``--profile-prompts``
generate calls of ``--profile-bs`` prompts each (default 2 x 1; read them with ``benchmark/analyze_trace.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time

# Short code prompts written for this benchmark (the tiny pair is trained on Python source).
PROMPTS = [
    "def fibonacci(n):\n    ",
    "class LRUCache:\n    def __init__(self, capacity):\n        ",
    "import os\nimport sys\n\n\ndef main(argv=None):\n    ",
    "def read_config(path):\n    with open(path) as f:\n        ",
    "    for i in range(len(items)):\n        if ",
    "def is_prime(n):\n    if n < 2:\n        return False\n    ",
    "class Stack:\n    def push(self, item):\n        ",
    "try:\n    import json\nexcept ImportError:\n    ",
    "def __repr__(self):\n        return ",
    "    def __eq__(self, other):\n        if not isinstance(other, ",
    "def parse_args(args):\n    parser = argparse.ArgumentParser(",
    "        raise ValueError(\"",
    "def merge(a, b):\n    result = []\n    ",
    "    @property\n    def name(self):\n        ",
    "if __name__ == \"__main__\":\n    ",
    "def flatten(nested):\n    for item in nested:\n        ",
    "def binary_search(items, target):\n    lo, hi = 0, len(items) - 1\n    ",
    "class Node:\n    def __init__(self, value, next=None):\n        ",
    "def load_json(path):\n    import json\n    ",
    "    def __len__(self):\n        return ",
    "def main():\n    args = parse_args()\n    ",
    "for key, value in sorted(mapping.items()):\n    ",
    "def get(self, key, default=None):\n        ",
    "    if not isinstance(name, str):\n        raise TypeError(",
    "def write_lines(path, lines):\n    with open(path, \"w\") as f:\n        ",
    "class Timer:\n    def __enter__(self):\n        ",
    "def quicksort(xs):\n    if len(xs) <= 1:\n        return xs\n    ",
    "    def close(self):\n        if self._closed:\n            ",
    "import re\n\n_PATTERN = re.compile(",
    "def count_words(text):\n    counts = {}\n    ",
    "    except KeyError:\n        ",
    "def __iter__(self):\n        ",
    "class Config(object):\n    \"\"\"",
    "def dedent(text):\n    lines = text.splitlines()\n    ",
    "    while stack:\n        node = stack.pop()\n        ",
    "def normalize_path(path):\n    ",
    "    @classmethod\n    def from_dict(cls, data):\n        ",
    "def chunks(seq, n):\n    for i in range(0, len(seq), n):\n        ",
    "    def __hash__(self):\n        return hash(",
    "def retry(func, attempts=3):\n    for attempt in range(attempts):\n        try:\n            ",
    "        self.assertEqual(",
    "def _check_type(value, expected):\n    if ",
    "with tempfile.TemporaryDirectory() as tmp:\n    ",
    "def encode(self, s, errors=\"strict\"):\n        ",
    "class Error(Exception):\n    ",
    "    def setUp(self):\n        ",
    "def gcd(a, b):\n    while b:\n        ",
    "    return \"\".join(",
]

COMMON = dict(dtype="bfloat16", mem_fraction_static=0.45, context_length=2048, max_total_tokens=65536,
              sampling_backend="pytorch", cuda_graph_max_bs_decode=48, log_level="error")


def engine_caps(bs_list) -> dict:
    """COMMON with the CUDA-graph cap and the running-request cap at the largest batch size measured (at least
    COMMON's 48). Session 39 (tiny pair, continuous, bs 64, both at 48): plain decoding ran 64 requests without
    graphs (13000 tok/s against 29148 at bs 48), and the speculative engines ran 48 at a time with 16 queued, since
    upstream's speculative handlers reset an unset ``max_running_requests`` to 48; so bs 64 measured the caps."""
    cap = max(COMMON["cuda_graph_max_bs_decode"], *[int(b) for b in bs_list])
    return {**COMMON, "cuda_graph_max_bs_decode": cap, "max_running_requests": cap}


def engine_kwargs(spec: str, draft: str, backend: str) -> dict:
    """``plain`` | ``dflash`` | ``ddtree:<budget>:<topk>``, each optionally suffixed ``+nograph``
    (CUDA graphs off), ``+nooverlap`` (``--disable-overlap-schedule``), ``+p16`` / ``+p64`` (``--page-size``)
    and / or an attention backend
    (``+fa3``, ``+triton``, ``+flashinfer``: this configuration's backend instead of ``backend``), e.g.
    ``dflash+fa3``; environment modifiers (``ENV_MODIFIERS``, e.g. ``+fa3tree``) go to ``engine_env``."""
    spec, *mods = spec.split("+")
    kw = dict(attention_backend=backend)
    for mod in mods:
        if mod in ATTENTION_BACKENDS:
            kw["attention_backend"] = mod
        elif mod in _MODIFIERS:
            kw.update(_MODIFIERS[mod])
        elif mod not in ENV_MODIFIERS and mod not in AFTER_WARMUP and plugin_hooks(mod) is None:
            known = (sorted(_MODIFIERS) + sorted(ENV_MODIFIERS) + sorted(AFTER_WARMUP)
                     + ["pin<bucket>", "phases", "syncwatch", "split", "floor"] + list(ATTENTION_BACKENDS))
            raise ValueError(f"unknown config modifier {mod!r}: use one of {known}")
    if spec == "plain":
        return kw
    if spec == "dflash":
        return dict(kw, speculative_algorithm="DFLASH", speculative_draft_model_path=draft)
    parts = spec.split(":")
    if (parts[0] != "ddtree" or len(parts) != 3 or not (parts[1].isdigit() or parts[1] == "auto")
            or not parts[2].isdigit()):
        raise ValueError(f"unknown config {spec!r}: use plain | dflash | ddtree:<budget or auto>:<topk>")
    _, budget, topk = parts
    return dict(kw, speculative_algorithm="DDTREE", speculative_draft_model_path=draft,
                speculative_ddtree_budget=budget if budget == "auto" else int(budget),
                speculative_ddtree_topk=int(topk))


def _probe_fa3_import():
    """None when ``sgl_kernel.flash_attn`` imports, else the import error's last line. In a child process: the
    benchmark's own process must not load the library (or touch the GPU) next to the engines it measures."""
    proc = subprocess.run([sys.executable, "-c", "import sgl_kernel.flash_attn"], capture_output=True, text=True,
                          timeout=300)
    if proc.returncode == 0:
        return None
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    return lines[-1].strip() if lines else f"exit status {proc.returncode}"


def fa3_unavailable(specs, backend: str, probe=None):
    """Why configs on fa3 cannot start here (sgl_kernel's fa3 module does not import: on the lent H200 its 1.1 GB
    library is staged into /tmp, which a machine given back loses), or None. Checked before any engine starts, so
    a run does not spend minutes starting the configs that do not need fa3 first. ``probe``: a stand-in for
    ``_probe_fa3_import`` (tests)."""
    if not any(engine_kwargs(spec, "D", backend)["attention_backend"] == "fa3" for spec in specs):
        return None
    error = (probe or _probe_fa3_import)()
    return None if error is None else f"a config runs on fa3 but sgl_kernel.flash_attn does not import ({error})"


_MODIFIERS = {"nograph": dict(disable_cuda_graph=True), "nooverlap": dict(disable_overlap_schedule=True),
              "p16": dict(page_size=16), "p64": dict(page_size=64),  # KV pages of 16 / 64 tokens (default 1)
              # every garbage collection of the scheduler with its duration in the engine log (SGLang's own GC
              # logger, SGLANG_LOG_GC=1, INFO lines): benchmark/gc_log_summary.py totals them
              "gclog": dict(log_level="info"),
              # the engine log at INFO: budget auto's start-up cost table and policy, and every decode-log line's
              # "auto budget: mean M, rounds by budget b:n ..." (one line per 40 rounds; prefill lines too)
              "loginfo": dict(log_level="info"),
              # a decode-log line every round (a diagnostic: the lines cost host time): budget auto's bucket and
              # period per round, which benchmark/auto_log_rounds.py summarises per bucket (median against mean)
              "logrounds": dict(log_level="info", decode_log_interval=1),
              # the target's prefill CUDA graphs from 1 token (upstream's list starts at 4 and replays a batch only
              # where padding at most doubles it, so a prefill of 1 new token, the whole prefill of a prompt the
              # radix cache holds but its last token, runs eagerly; session 45: ~400 of them per speculative engine
              # in session 43's one-length run, ~10 in AR's); upstream 0.5.16's list after them, to 2048 tokens (the
              # tiny pair's context length caps upstream's there too; a larger target's prefills above 2048 run eagerly).
              # Session 46: 1.081x for auto on triton, where DDTREE now adds 1 and 2 itself (validation); here for
              # fa3 / flashinfer DDTREE engines and for DFLASH / AR beside them
              "pregraph1": dict(cuda_graph_bs_prefill=[1, 2] + list(range(4, 33, 4)) + list(range(48, 257, 16))
                                + list(range(288, 513, 32)) + list(range(576, 1025, 64))
                                + list(range(1280, 2049, 256)))}
# (session 48's +prefull, the same sizes through upstream's full prefill graph backend, is gone: every engine failed
# at its first prefill, the graph drops the target's captured hidden states; validation refuses it, session 49)
# Config modifiers that set environment variables of the engine's processes (``engine_env``).
ENV_MODIFIERS = {
    "fa3tree": {"SGLANG_DDTREE_FA3_TREE_ATTENTION": "1"},  # fa3: DDTREE's fused tree attention (worker.fa3_tree)
    "fa3cascade": {"SGLANG_DDTREE_FA3_TREE_ATTENTION": "0"},  # fa3: upstream's cascade tree verify
    "gclog": {"SGLANG_LOG_GC": "1"},  # with _MODIFIERS["gclog"]
    "kveager": {"SGLANG_DDTREE_DRAFT_KV_GRAPH": "0"},  # DDTREE: upstream's eager draft-KV append
    "kvgraph": {"SGLANG_DDTREE_DRAFT_KV_GRAPH": "1"},  # DDTREE: the draft-KV append from CUDA graphs (the default)
    "headgraph": {"SGLANG_DDTREE_HEAD_GRAPH": "1"},  # DDTREE on fa3: a tree round's head from CUDA graphs (the default)
    "headeager": {"SGLANG_DDTREE_HEAD_GRAPH": "0"},  # DDTREE: the eager tree head (head_graph off)
    "fiplan": {"SGLANG_DDTREE_FLASHINFER_PLAN": "1"},  # flashinfer: DDTREE's host-sync-free plan (flashinfer_plan)
    "fiupstream": {"SGLANG_DDTREE_FLASHINFER_PLAN": "0"},  # flashinfer: upstream's plan() (default: ours on 0.6.14)
    "pagedx": {"SGLANG_DDTREE_EXPERIMENTAL_PAGED": "1"},  # DDTREE: --page-size > 1 beyond the GPU-verified configs
    "topkthr": {"SGLANG_DDTREE_TOPK_THRESHOLD": "1"},  # DDTREE: the draft head's threshold top-K pass (the default)
    "topkall": {"SGLANG_DDTREE_TOPK_THRESHOLD": "0"},  # DDTREE: every slice's top-K at 4096 x 8 (before session 27)
    "warmup": {"SGLANG_DDTREE_WARMUP": "1"},  # DDTREE: the round's Triton kernels compiled at start-up (worker.warmup)
    "nowarmup": {"SGLANG_DDTREE_WARMUP": "0"},  # DDTREE: each round kernel compiled at its first round (before session 29)
    "chain": {"SGLANG_DDTREE_AUTO_CHAIN": "1"},  # budget auto on fa3: the chain bucket too (the default, widths)
    "nochain": {"SGLANG_DDTREE_AUTO_CHAIN": "0"},  # budget auto: tree buckets only (before session 30)
    "costdrift": {"SGLANG_DDTREE_AUTO_COST_DRIFT": "1"},  # budget auto: stale costs follow the drift (the default)
    "nocostdrift": {"SGLANG_DDTREE_AUTO_COST_DRIFT": "0"},  # budget auto: each bucket's cost its own (before session 40)
    "nostaleexplore": {"SGLANG_DDTREE_AUTO_EXPLORE_STALE": "0"},  # budget auto: the least observed near (< session 41)
    # DDTREE: the admission window (worker.admission, on by default since session 49: 8 passes while >= 12 requests
    # run): noadmit turns it off, admitwaitN sets N
    "noadmit": {"SGLANG_DDTREE_ADMIT_WAIT": "0"},
    "admitwait4": {"SGLANG_DDTREE_ADMIT_WAIT": "4"},
    "admitwait8": {"SGLANG_DDTREE_ADMIT_WAIT": "8"},
    "admitwait16": {"SGLANG_DDTREE_ADMIT_WAIT": "16"},
    # DDTREE on the 0.5.16 family: its own prefill, the two length copies without upstream's host wait
    # (worker.prefill, experimental, session 44)
    "prefillasync": {"SGLANG_DDTREE_PREFILL_ASYNC": "1"},
}
# DIAGNOSTIC modifiers through the TEST-ONLY plugin (test/_test_plugin): the hooks of ``_test_plugin_env.plugin_env``
# they ask for. pin<bucket> (pin0, pin15, pinchain15, ...: ``config.parse_bucket``'s names): budget auto verifies that
# bucket every round, so a profile shows its round alone (pin0: a width-0 round against plain decoding's step;
# pinchain15: the chain's round against DFLASH's). phases: the scheduler's and the round's functions timed with
# perf_counter per decode iteration, no profiler (``ddtree_test_hooks.phase_times``), written under PHASES_DIR as
# <config>.<pid>.json (``phase_times_summary.py`` reads them). syncwatch: the same file with only the loop's steps and
# the host waits timed, and every synchronizing CUDA call counted by call site (``phase_times.SyncWatch``). floor:
# every round of a budget-auto engine replaced by the least a width-0 round can do (``ddtree_test_hooks.floor_round``:
# greedy, never drafts again), to split a width-0 round's cost into the round's own and the spec-v2 path's floor.
# split: the phases file with only the loop's steps, the host waits and a decode iteration's once-an-iteration parts
# timed (``phase_times.SPLIT_LABELS``), so that a speculative iteration's parts compare with plain decoding's.
PHASES_DIR_ENV = "DDTREE_BENCH_PHASES_DIR"


def phases_path(spec: str) -> str:
    """Where config ``spec``'s engine writes its phase times: $DDTREE_BENCH_PHASES_DIR (default /tmp/ddtree_phases)
    / the config's name with ':' and '+' as '_' (the folder is made here)."""
    folder = os.environ.get(PHASES_DIR_ENV) or "/tmp/ddtree_phases"
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, spec.replace(":", "_").replace("+", "_"))


def plugin_hooks(mod: str, spec: str = ""):
    """The test plugin's hooks a config modifier asks for (``pin<bucket>``, ``phases``), or None; ``spec``: the
    whole config, which names the phase-times file."""
    if mod == "phases":
        return dict(phase_times=phases_path(spec)) if spec else {}
    if mod == "syncwatch":
        return dict(sync_watch=phases_path(spec)) if spec else {}
    if mod == "split":
        return dict(phase_times=phases_path(spec), phase_split=True) if spec else {}
    if mod == "floor":
        return dict(floor_round=True)
    if mod.startswith("pin"):
        from sglang_ddtree.config import parse_bucket

        try:
            return dict(pin_budget=parse_bucket(mod[len("pin"):]))
        except ValueError:
            return None
    return None


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_PLUGIN_DIR = os.path.join(_ROOT, "test", "_test_plugin")  # == _test_plugin_env.PLUGIN_DIR


def _test_plugin_env():
    """test/worker/_test_plugin_env.py (the test suite's door to the plugin), imported on first use: importing it
    puts the plugin on this process's path."""
    helpers = os.path.join(_ROOT, "test", "worker")
    if helpers not in sys.path:
        sys.path.insert(0, helpers)
    import _test_plugin_env

    return _test_plugin_env


# Config modifiers that act on the engine once it is warm (``after_warmup``): ``+gcfreeze`` freezes the garbage
# collector of the engine's processes (``Engine.freeze_gc``, what a server's ``/freeze_gc`` does after warm-up).
AFTER_WARMUP = {"gcfreeze": "freeze_gc"}


def after_warmup(engine, spec: str) -> None:
    """Apply ``spec``'s ``AFTER_WARMUP`` modifiers to a warm engine."""
    for mod in spec.split("+")[1:]:
        if mod in AFTER_WARMUP:
            getattr(engine, AFTER_WARMUP[mod])()


def engine_env(spec: str) -> dict:
    """The environment variables a config's modifiers set, e.g. ``ddtree:15:8+fa3+fa3tree``."""
    env, hooks = {}, None
    for mod in spec.split("+")[1:]:
        env.update(ENV_MODIFIERS.get(mod, {}))
        asked = plugin_hooks(mod, spec)
        if asked is not None:
            hooks = dict(hooks or {}, **asked)
    if hooks is not None:  # every test-plugin variable at once, and PYTHONPATH (a child process, bench_paired, needs it)
        env.update(_test_plugin_env().plugin_env(**hooks))
    return env


@contextlib.contextmanager
def engine_environment(spec: str):
    """os.environ with ``engine_env(spec)`` while an in-process Engine starts (its processes inherit it; a spawned
    scheduler copies this process's sys.path, not PYTHONPATH, so a test-plugin modifier puts the plugin there)."""
    env = engine_env(spec)
    saved = {k: os.environ.get(k) for k in env}
    if any(plugin_hooks(mod) is not None for mod in spec.split("+")[1:]):
        _test_plugin_env().add_plugin_path()
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
ATTENTION_BACKENDS = ("fa3", "triton", "flashinfer")


def request_params(params: dict, n: int, spread: float) -> list:
    """One sampling-params dict per prompt index 0..n-1: ``params`` with ``max_new_tokens`` M varied by up to
    +-``spread`` of it, round(M * (1 - spread + 2 * spread * u_i)) with u_i uniform in [0, 1) drawn from the index
    alone, so every configuration, repetition and process gives prompt i the same length (paired comparisons and the
    token equality with plain decoding hold); the mean stays ~M. With 0 every request asks M tokens. A server's
    requests differ in length: with one length, plain decoding's requests all finish on the same step, so under
    the continuous schedule its slots are refilled together and their prompts prefilled in one batch, while a
    speculative engine's requests finish rounds apart and are prefilled one by one (session 39's reading)."""
    if not 0.0 <= spread < 1.0:
        raise ValueError(f"--length-spread {spread}: must be in [0, 1)")
    m = int(params["max_new_tokens"])
    return [dict(params, max_new_tokens=max(1, round(m * (1.0 - spread + 2.0 * spread * _unit(i)))))
            for i in range(n)]


def _unit(i: int) -> float:
    """A number in [0, 1) fixed by ``i`` alone (splitmix64's finaliser: no RNG state, the same in every process)."""
    z = (i * 0x9E3779B97F4A7C15 + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return ((z ^ (z >> 31)) >> 11) / float(1 << 53)


def _per_request(params, n: int) -> list:
    """``params`` as one dict per request: a list (``request_params``) as given, a dict repeated."""
    if isinstance(params, list):
        if len(params) != n:
            raise ValueError(f"{len(params)} sampling params for {n} prompts")
        return params
    return [params] * n


def decode_in_batches(engine, prompts, bs: int, params) -> dict:
    """Generate ``prompts`` in consecutive batches of ``bs`` requests, each waited for (``_decoded``'s result).
    ``params``: one sampling-params dict for every request, or one per prompt (``request_params``)."""
    per = _per_request(params, len(prompts))
    outs, accepts = [], []
    t = time.perf_counter()
    for s in range(0, len(prompts), bs):
        for r in engine.generate(input_ids=prompts[s : s + bs], sampling_params=per[s : s + bs]):
            outs.append(list(r["output_ids"]))
            accepts.append(r["meta_info"].get("spec_accept_length"))
    return _decoded(outs, accepts, time.perf_counter() - t)


def _decoded(outs, accepts, wall: float) -> dict:
    """A schedule's result: outputs (token ids per prompt), tokens (total generated), wall_s and
    mean_accept_length (meta_info's, None without speculation)."""
    acc = [a for a in accepts if a is not None]
    return {"outputs": outs, "tokens": sum(len(o) for o in outs), "wall_s": wall,
            "mean_accept_length": sum(acc) / len(acc) if acc else None}


def decode_continuous(engine, prompts, bs: int, params) -> dict:
    """Generate ``prompts`` with at most ``bs`` requests in flight, each finished request replaced by the next prompt
    at once: a server under a steady load of ``bs`` concurrent requests (continuous batching), where
    ``decode_in_batches`` waits for a whole batch before the next. A speculative engine's requests finish after
    different numbers of rounds (their accept lengths differ), so in waves every batch runs down to its slowest
    request at a shrinking batch size, a tail that plain decoding (every request the same number of steps) never
    has. Returns what ``decode_in_batches`` returns, outputs in prompt order. Uses the engine's own event loop
    (``Engine.async_generate``, as ``Engine.generate`` runs it). ``params``: as ``decode_in_batches``'."""
    import asyncio

    n = len(prompts)
    per = _per_request(params, n)
    outs, accepts = [None] * n, [None] * n

    async def run():
        slots = asyncio.Semaphore(bs)

        async def one(i):
            async with slots:
                r = await engine.async_generate(input_ids=prompts[i], sampling_params=per[i])
            outs[i] = list(r["output_ids"])
            accepts[i] = r["meta_info"].get("spec_accept_length")

        await asyncio.gather(*(one(i) for i in range(n)))

    t = time.perf_counter()
    engine.loop.run_until_complete(run())
    return _decoded(outs, accepts, time.perf_counter() - t)


SCHEDULES = {"waves": decode_in_batches, "continuous": decode_continuous}


def run_config(spec, target, draft, prompts, args) -> dict:
    import sglang

    t0 = time.time()
    with engine_environment(spec):
        engine = sglang.Engine(model_path=target, **{**engine_caps(args.bs),
                                                     **engine_kwargs(spec, draft, args.attention_backend)})
    rec = {"config": spec, "start_s": round(time.time() - t0, 1), "by_bs": {}}
    params = dict(temperature=0.0, max_new_tokens=args.max_new_tokens, ignore_eos=True)
    try:
        engine.generate(input_ids=prompts[:2], sampling_params=dict(params, max_new_tokens=16))  # warm-up
        after_warmup(engine, spec)
        for bs in args.bs:
            d = decode_in_batches(engine, prompts, bs, params)
            acc = d["mean_accept_length"]
            rec["by_bs"][str(bs)] = {
                "requests": len(d["outputs"]), "output_tokens": d["tokens"], "wall_s": round(d["wall_s"], 3),
                "tokens_per_s": round(d["tokens"] / d["wall_s"], 1),
                "mean_accept_length": round(acc, 3) if acc is not None else None,
                "outputs": d["outputs"],
            }
        if args.profile_dir:  # one torch-profiler trace of decoding at --profile-bs (analyze_trace.py reads it)
            out_dir = os.path.join(args.profile_dir, spec.replace(":", "_").replace("+", "_"))
            engine.start_profile(output_dir=out_dir, activities=["CPU", "GPU"], with_stack=True, record_shapes=False)
            for batch in profile_batches(prompts, args.profile_prompts, args.profile_bs):
                engine.generate(input_ids=batch, sampling_params=params)
            engine.stop_profile()
            rec["profile_dir"], rec["profile_bs"] = out_dir, args.profile_bs
    finally:
        engine.shutdown()
    return rec


def profile_batches(prompts, calls: int, bs: int) -> list:
    """The generate calls a profile records: ``calls`` batches of ``bs`` prompts each, taken in order and wrapping
    around the prompt list (bs 1: one prompt a call, as before session 27)."""
    return [[prompts[(i * bs + j) % len(prompts)] for j in range(bs)] for i in range(calls)]


def environment(argv) -> dict:
    import torch

    env = {"command": " ".join([os.path.basename(sys.executable)] + argv), "python": platform.python_version(),
           "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **host_cpu()}
    for mod in ("sglang", "triton", "sglang_ddtree"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception as e:  # record, do not fail the run
            env[mod] = f"unavailable: {e}"
    return env


def host_cpu(cpuinfo: str = "/proc/cpuinfo") -> dict:
    """The host's CPU model, logical CPU count and 1-minute load average: the tiny pair's rounds are bound by the host
    (sessions 39 and 40 on two H100 hosts: the same DFLASH engine at bs 48 read 19139 and 11010 tok/s), so absolute
    numbers compare only within one host. Fields it cannot read are None."""
    model = None
    try:
        with open(cpuinfo) as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        pass
    try:
        load = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    return {"cpu_model": model, "cpu_count": os.cpu_count(), "loadavg_1m": load}


def positive_ints(text: str, flag: str, noun: str, example: str) -> list:
    """A comma-separated list of integers >= 1 ('1,32' -> [1, 32]); anything else a ValueError naming the flag,
    e.g. "--bs '0': comma-separated batch sizes >= 1, e.g. 1,32"."""
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or any(v < 1 for v in out):
        raise ValueError(f"{flag} {text!r}: comma-separated {noun} >= 1, e.g. {example}")
    return out


def event_median_us(fn, iters: int, digits: int = 1) -> float:
    """Median CUDA-event time of ``fn()`` in microseconds over ``iters`` calls, each timed alone, after one untimed
    call (compile / warm-up): a forward's or a long kernel's time; a kernel of a few microseconds shows its host
    launch here (``graph_median_us``)."""
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    return round(statistics.median(times), digits)


TIMERS = ("graph", "launch")  # the kernel benchmarks' --timer: graph_median_us or event_median_us


def graph_median_us(fn, iters: int, calls: int = 1, digits: int = 1) -> float:
    """Median GPU time in microseconds of one ``fn()``, replayed from a CUDA graph that holds ``calls`` back-to-back
    calls (``widths.replay_ms`` of ``iters`` replays / ``calls``), after an untimed call (compile) and a replay.
    Kernels of a few microseconds launched one at a time from Python are timed by their host launch (~20-60 us a
    Triton launch; session 27: every merge configuration "took" ~64 us a launch, ~6.4 us in the verify graph); in a
    graph, as in the round, the GPU's own time is what shows."""
    import torch

    from sglang_ddtree.worker.widths import replay_ms  # budget auto's calibration timer (no SGLang import)

    fn()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm the caching allocator off the capture stream (torch's recipe)
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return round(replay_ms(graph, repeats=iters) * 1000.0 / calls, digits)


def kernel_median_us(timer: str, fn, iters: int, calls: int, digits: int = 1) -> float:
    """``timer`` "graph" (``graph_median_us`` of ``calls`` calls a replay) or "launch" (``event_median_us``)."""
    if timer not in TIMERS:
        raise ValueError(f"timer must be one of {TIMERS}, got {timer!r}")
    if timer == "graph":
        return graph_median_us(fn, iters, calls=calls, digits=digits)
    return event_median_us(fn, iters, digits=digits)


def write_report(path: str, argv, **sections) -> dict:
    """``sections`` under this run's command and ``environment``, written as JSON to ``path`` (its folder made)."""
    env = environment(argv)
    report = {"command": env.pop("command"), "environment": env, **sections}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    return report


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--configs", default="plain,dflash,ddtree:16:4,ddtree:64:8")
    ap.add_argument("--bs", default="1,16", help="comma-separated batch sizes")
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--attention-backend", default="triton")
    ap.add_argument("--deadline-s", type=float, default=1e9, help="start no new engine after this many seconds")
    ap.add_argument("--profile-dir", help="after timing, write a torch-profiler trace of decoding at --profile-bs per "
                    "config under this directory (CPU + GPU, Python stacks: slower while it records)")
    ap.add_argument("--profile-prompts", type=int, default=2, help="generate calls while profiling")
    ap.add_argument("--profile-bs", type=int, default=1, help="prompts per generate call while profiling")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    args.bs = [int(b) for b in args.bs.split(",")]
    for flag, value in (("--profile-prompts", args.profile_prompts), ("--profile-bs", args.profile_bs)):
        if value < 1:
            ap.error(f"{flag} {value}: must be at least 1")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.target)
    prompts = [tok.encode(PROMPTS[i % len(PROMPTS)]) for i in range(args.num_prompts)]
    report = {"environment": environment(argv), "settings": {**engine_caps(args.bs),
                                                             "attention_backend": args.attention_backend,
              "max_new_tokens": args.max_new_tokens, "num_prompts": args.num_prompts, "greedy": True,
              "target": args.target, "draft": args.draft}, "results": []}
    t_start = time.time()
    for spec in args.configs.split(","):
        if time.time() - t_start > args.deadline_s:
            print(f"[bench_e2e] deadline reached, skipping {spec}", flush=True)
            report["results"].append({"config": spec, "skipped": "deadline"})
            continue
        print(f"[bench_e2e] {spec} ({time.time() - t_start:.0f} s)", flush=True)
        try:
            rec = run_config(spec, args.target, args.draft, prompts, args)
        except Exception as e:  # record and go on with the next configuration
            import traceback

            rec = {"config": spec, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        report["results"].append(rec)
        _summarise(report)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    _summarise(report, final=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    return 0


def plain_reference(specs):
    """The config whose outputs the others are compared with: the first plain-decoding one (``plain`` with any
    modifiers, e.g. ``plain+fa3``), or None. Until session 27 only a config named exactly ``plain`` counted, so runs
    of ``plain+fa3`` recorded no equality at all."""
    return next((s for s in specs if s.split("+")[0] == "plain"), None)


def _summarise(report, final=False) -> None:
    """Add token-equality vs the plain config and print one line per (config, bs)."""
    ref_spec = plain_reference([r.get("config", "") for r in report["results"] if "by_bs" in r])
    plain = next((r for r in report["results"] if r.get("config") == ref_spec and "by_bs" in r), None)
    for rec in report["results"]:
        for bs, m in rec.get("by_bs", {}).items():
            if plain is not None and bs in plain["by_bs"]:
                ref = plain["by_bs"][bs]["outputs"]
                m["equal_to_plain"] = f"{sum(a == b for a, b in zip(m['outputs'], ref))}/{len(ref)}"
            if final:
                print(f"[bench_e2e] {rec['config']:>14} bs {bs:>3}: {m['tokens_per_s']:>8.1f} tok/s, accept "
                      f"{m['mean_accept_length']}, == plain {m.get('equal_to_plain')}", flush=True)
        if final and "error" in rec:
            print(f"[bench_e2e] {rec['config']}: {rec['error']}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
