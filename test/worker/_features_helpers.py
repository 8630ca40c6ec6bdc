"""Engine side of ``test_features_gpu.py``: a scenario runner (a script, one engine per process) and the
plumbing its checks share (loading the records, the float32 near-tie rule, plugin discovery for subprocesses).

    python test/worker/_features_helpers.py --phase ddtree|chunked|plain --out DIR [--fake]

``ddtree`` (DDTREE, budget 64 or ``DDTREE_TEST_BUDGET``) and ``chunked`` (the same with
``chunked_prefill_size=64``) run their scenarios and append one JSON line per scenario to ``DIR/<phase>.jsonl`` as
soon as it finishes, so a crash keeps what ran before it. ``plain`` (no speculation) replays every request the
DDTREE phases recorded, scenario by scenario, with the same input ids, sampling params, order and cache flushes:
the reference.
``--fake`` swaps the engine for the float32 reference target on CPU (greedy; SGLang's length / stop / abort /
context-limit / prefix-cache semantics imitated; the "DDTREE" fakes flip float32 near-ties on purpose) to
dry-run this plumbing and the test module's checks without a GPU (``SGLANG_DDTREE_FEATURES_FAKE=1``, with
test/conftest.py's CUDA check patched: the command is in test_features_gpu.py's docstring; about 50 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import traceback
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from _gpu_backend import test_backend, test_budget, test_tp_size  # noqa: E402
CONTEXT = 1024
BUDGET, TOPK = test_budget(), 8  # DDTREE_TEST_BUDGET (default 64; auto / auto:N for budget auto)
COMMON = dict(dtype="bfloat16", mem_fraction_static=0.4, context_length=CONTEXT, max_total_tokens=65536,
              sampling_backend="pytorch", cuda_graph_max_bs_decode=16, attention_backend=test_backend(),
              tp_size=test_tp_size(), log_level="error")
REQUEST_TIMEOUT_S = 120
SCENARIO_TIMEOUT_S = 300
# Prompts whose float32 greedy continuation ends with <|endoftext|> after 3-4 tokens (top-2 gaps >= 0.42).
EOS_PROMPTS = [
    '    return result\n\n\nif __name__ == "__main__":\n    ',
    'import unittest\n\nclass Test(unittest.TestCase):\n    def test_foo(self):\n        self.assertEqual(1, 1)'
    '\n\n\nif __name__ == "__main__":\n    ',
    '        self.assertEqual(x, 1)\n\n\nif __name__ == "__main__":\n    unittest.',
]
BATCH_MAX_NEW = [64, 5, 48, 1, 64, 17, 2, 33, 64, 9, 24, 3]  # 12 requests, joining and leaving mid-flight
RADIX_PREFIX = 384
STOP_PROMPTS = [0, 5, 9]
STOP_TOKEN_AT, STOP_STR_AT = (6, 19, 33), (8, 27)
# Stops end within the first 40 of 64 tokens: a round that reaches max_new_tokens finishes by LENGTH in
# SGLang (checked before stops), and an accepted path is at most 16 tokens long.
STOP_WITHIN = 40
MAX_NEW_CASES = {0: [1, 2, 3, 4, 6, 11, 16, 23], 5: [5, 7, 13]}
# (tag, prompt tokens, max_new_tokens): fits; fits but the scheduler clips max_new_tokens to
# context - 2 - prompt (fewer tokens left than the tree budget); rejected by validation (two ways).
LONG_CASES = [("fit", CONTEXT - 64 - 8, 64), ("clipped", CONTEXT - 40, 40), ("nearly full", CONTEXT - 8, 8),
              ("over budget", CONTEXT - 24, 64), ("too long", CONTEXT + 6, 8)]
ABORT_MAX_NEW = 600


def sp(max_new: int, ignore_eos: bool = True, **kw) -> dict:
    return dict(temperature=0.0, max_new_tokens=max_new, ignore_eos=ignore_eos, **kw)


def engine_kwargs(phase: str, pair) -> dict:
    kw = dict(COMMON, model_path=pair.target)
    if phase == "plain":
        return kw
    kw.update(speculative_algorithm="DDTREE", speculative_draft_model_path=pair.draft,
              speculative_ddtree_budget=BUDGET, speculative_ddtree_topk=TOPK)
    if phase == "chunked":
        kw["chunked_prefill_size"] = 64
    return kw


# ---- pure helpers (shared with the checks) ------------------------------------------------------
def first_stop_len(ids, stop: str, decode):
    """Smallest m with ``stop`` in decode(ids[:m]) (SGLang's stop-string finish length), else None."""
    return next((m for m in range(1, len(ids) + 1) if stop in decode(ids[:m])), None)


def stop_cases(ref, decode, eos: int):
    """Stop-token and stop-string sampling params that end inside ``ref`` (a greedy ignore_eos output)."""
    end = min(ref.index(eos) if eos in ref else len(ref), STOP_WITHIN)  # no EOS before a stop
    cases = []
    for target in STOP_TOKEN_AT:
        k = next((k for k in range(target, end) if ref[k] not in ref[:k]), None)
        if k is not None:
            cases.append(("stop_token", sp(64, ignore_eos=False, stop_token_ids=[ref[k]])))
    strs = []
    for target in STOP_STR_AT:
        for j in range(target, end - 2):
            s = decode(ref[j:j + 2])
            m = first_stop_len(ref[:end], s, decode) if len(s) >= 2 and s.strip() else None
            if m is not None and m >= 3:
                strs.append(s)
                cases.append(("stop_str", sp(64, ignore_eos=False, stop=[s])))
                if len(s) >= 3 and s[1:].strip():  # a stop string that starts inside a token
                    cases.append(("stop_str", sp(64, ignore_eos=False, stop=[s[1:]])))
                break
    if len(strs) == 2:
        cases.append(("stop_str", sp(64, ignore_eos=False, stop=[strs[1], strs[0]])))
    return cases


def overlapping_pairs(reqs):
    """(a, b) tags where b joined after a started and left before a finished (client-side clocks)."""
    return [(a["tag"], b["tag"]) for a in reqs for b in reqs
            if a is not b and a["t_start"] < b["t_start"] < a["t_end"] and b["t_end"] < a["t_end"]]


# ---- clients: a real engine or the CPU fake -----------------------------------------------------
class EngineClient:
    """``sglang.Engine`` through its async API (all calls run on the engine's own event loop)."""

    def __init__(self, kwargs: dict):
        import sglang

        self.engine = sglang.Engine(**kwargs)

    def run(self, coro, timeout):
        return self.engine.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    async def generate(self, ids, params, rid=None, on_chunk=None) -> dict:
        kw = dict(input_ids=list(ids), sampling_params=dict(params), rid=rid)
        if on_chunk is None:
            return await self.engine.async_generate(**kw)
        last = None
        async for chunk in await self.engine.async_generate(stream=True, **kw):
            last = chunk
            on_chunk(chunk)
        return last

    def abort(self, rid: str) -> None:
        self.engine.tokenizer_manager.abort_request(rid=rid)

    async def flush(self) -> None:
        out = await self.engine.tokenizer_manager.flush_cache(timeout_s=30)
        if not out.success:
            raise RuntimeError(f"flush_cache failed: {out.message!r}")

    def shutdown(self) -> None:
        self.engine.shutdown()


class FakeClient:
    """CPU stand-in for an engine (``--fake``): float32 greedy decoding with SGLang's finish semantics
    imitated. ``flip_near_ties`` picks the second token where the top-2 gap is < 0.02 (like a bf16 flip)."""

    def __init__(self, pair, tokenizer, flip_near_ties: bool):
        import torch

        from sglang_ddtree.reference.qwen3 import Qwen3ForCausalLM

        torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
        self.target = Qwen3ForCausalLM.from_pretrained(pair.target, dtype=torch.float32).eval()
        self.tok, self.flip = tokenizer, flip_near_ties
        self.cache, self.aborted = [], set()
        self.loop = asyncio.new_event_loop()

    def run(self, coro, timeout):
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def abort(self, rid):
        self.aborted.add(rid)

    async def flush(self):
        self.cache = []

    def shutdown(self):
        self.loop.close()

    def _finish(self, out, params):  # SGLang's order: length, stop strings, stop tokens / EOS
        if len(out) >= params["max_new_tokens"]:
            return {"type": "length", "length": params["max_new_tokens"]}
        if any(s in self.tok.decode(out) for s in params.get("stop", [])):
            text = self.tok.decode(out)
            s = min((s for s in params["stop"] if s in text), key=text.find)
            return {"type": "stop", "matched": s}
        if not params.get("ignore_eos") and (out[-1] in params.get("stop_token_ids", []) or
                                             out[-1] == self.tok.eos_token_id):
            return {"type": "stop", "matched": out[-1]}
        return None

    async def generate(self, ids, params, rid=None, on_chunk=None):
        import torch

        from sglang_ddtree.reference.qwen3 import KVCache

        n, length = params["max_new_tokens"], len(ids)
        if length >= CONTEXT:
            raise ValueError(f"The input ({length} tokens) is longer than the model's context length ({CONTEXT} tokens).")
        if length + n > CONTEXT:
            raise ValueError(f"Requested token count exceeds the model's maximum context length of {CONTEXT} tokens.")
        params = dict(params, max_new_tokens=min(n, CONTEXT - 1 - length - 1))
        cached = min(max((next((i for i, (a, b) in enumerate(zip(ids, s)) if a != b), min(len(ids), len(s)))
                          for s in self.cache), default=0), length - 1)
        kv, x, out, finish = KVCache(self.target.config.num_hidden_layers), torch.tensor([list(ids)]), [], None
        while finish is None:
            with torch.no_grad():
                res = self.target(x, kv.length + torch.arange(x.shape[1])[None], kv)
            kv.append(res.kv)
            top = torch.topk(res.logits[0, -1], 2)
            near_tie = float(top.values[0] - top.values[1]) < 0.02
            out.append(int(top.indices[1 if self.flip and near_tie else 0]))
            x = torch.tensor([[out[-1]]])
            finish = self._finish(out, params)
            if finish is None and rid in self.aborted:
                finish = {"type": "abort", "message": "Aborted", "status_code": None}
            if on_chunk is not None and finish is None:
                on_chunk({"text": None, "output_ids": out, "meta_info": {"completion_tokens": len(out)}})
            await asyncio.sleep(0.001)
        self.cache.append(list(ids) + out[:-1])
        matched = finish.get("matched")
        text = self.tok.decode(out[:-1] if isinstance(matched, int) else out, skip_special_tokens=True)
        if isinstance(matched, str):
            text = text[:text.find(matched)]
        meta = dict(finish_reason=finish, prompt_tokens=length, completion_tokens=len(out), cached_tokens=cached,
                    spec_verify_ct=(len(out) + 1) // 2 if self.flip else 0)
        return {"text": text, "output_ids": out, "meta_info": meta}


# ---- scenarios (run on the DDTREE engines; "plain" replays them) --------------------------------
T0 = time.perf_counter()


class RequestTimeout(RuntimeError):
    pass


async def request(client, tag, ids, params, *, replay=True, rid=None, on_chunk=None, **extra) -> dict:
    rec = dict(tag=tag, input_ids=list(ids), sampling_params=params, replay=replay, rid=rid, **extra)
    start = time.perf_counter()
    try:
        out = await asyncio.wait_for(client.generate(ids, params, rid=rid, on_chunk=on_chunk), REQUEST_TIMEOUT_S)
        rec.update(output_ids=list(out.get("output_ids") or []), text=out.get("text"), meta=out.get("meta_info") or {})
    except asyncio.TimeoutError:
        raise RequestTimeout(f"request {tag!r} got no answer in {REQUEST_TIMEOUT_S} s") from None
    except Exception as e:  # expected for the context-limit cases; recorded, checked by the tests
        rec["error"] = f"{type(e).__name__}: {e}"
    rec["t_start"], rec["t_end"] = start - T0, time.perf_counter() - T0
    return rec


async def sc_batching(client, ctx):
    seq = []
    for i, n in enumerate(BATCH_MAX_NEW):
        await client.flush()
        seq.append(await request(client, f"seq{i}", ctx.prompts[i], sp(n)))
    lat = [r["t_end"] - r["t_start"] for r, n in zip(seq, BATCH_MAX_NEW) if n == 64 and "error" not in r]
    stagger = max(0.002, (statistics.median(lat) if lat else 0.2) / 8)

    async def delayed(i, n):
        await asyncio.sleep(i * stagger)
        return await request(client, f"conc{i}", ctx.prompts[i], sp(n))

    await client.flush()
    conc = await asyncio.gather(*(delayed(i, n) for i, n in enumerate(BATCH_MAX_NEW)))
    return dict(requests=seq + list(conc), replay_mode="concurrent", info=dict(stagger_s=stagger))


async def sc_radix(client, ctx):
    prefix = ctx.long_ids[:RADIX_PREFIX]
    a, b = prefix + ctx.prompts[12], prefix + ctx.prompts[13]
    await client.flush()
    ra = await request(client, "A", a, sp(48))
    rb = await request(client, "B", b, sp(48))
    ra2 = await request(client, "A again", a, sp(48))
    rc = await request(client, "A + 24 generated", a + ra.get("output_ids", [])[:24], sp(24))
    return dict(requests=[ra, rb, ra2, rc], replay_mode="seq", info=dict(prefix_len=len(prefix), a_len=len(a)))


async def sc_stop(client, ctx):
    reqs = []
    for p in STOP_PROMPTS:
        await client.flush()
        ref = await request(client, f"ref p{p}", ctx.prompts[p], sp(64), kind="ref")
        reqs.append(ref)
        if "error" in ref:
            continue
        cases = stop_cases(ref["output_ids"], ctx.decode, ctx.eos)
        cases += [("max_new", sp(n)) for n in MAX_NEW_CASES.get(p, [])]
        for kind, params in cases:
            await client.flush()
            reqs.append(await request(client, f"{kind} p{p} {params}", ctx.prompts[p], params, kind=kind,
                                      ref_tag=ref["tag"]))
    return dict(requests=reqs, replay_mode="concurrent", info={})


async def sc_eos(client, ctx):
    reqs = []
    for i, ids in enumerate(ctx.eos_prompts):
        for ignore in (False, True):
            await client.flush()
            reqs.append(await request(client, f"{'ignore_eos' if ignore else 'eos'} p{i}", ids,
                                      sp(32, ignore_eos=ignore), prompt=i))
    return dict(requests=reqs, replay_mode="concurrent", info={})


async def sc_abort(client, ctx):
    await client.flush()
    progress = asyncio.Event()

    def watch(chunk):
        if (chunk.get("meta_info") or {}).get("completion_tokens", 0) >= 8:
            progress.set()

    tag = uuid.uuid4().hex[:8]
    rids = [f"abort-{tag}-{i}" for i in range(4)]
    coros = [request(client, f"victim{i} (stream)", ctx.prompts[i], sp(ABORT_MAX_NEW), replay=False, rid=rids[i],
                     on_chunk=watch if i == 0 else (lambda chunk: None)) for i in range(3)]
    coros.append(request(client, "victim3 (non-stream)", ctx.prompts[3], sp(ABORT_MAX_NEW), replay=False,
                         rid=rids[3]))
    coros.append(request(client, "survivor", ctx.prompts[14], sp(64)))
    tasks = [asyncio.ensure_future(c) for c in coros]
    await asyncio.wait_for(progress.wait(), REQUEST_TIMEOUT_S)
    for rid in rids:
        client.abort(rid)
    t_abort = time.perf_counter() - T0
    reqs = list(await asyncio.gather(*tasks))
    reqs.append(await request(client, "after abort", ctx.prompts[15], sp(32)))
    return dict(requests=reqs, replay_mode="seq", info=dict(rids=rids, t_abort=t_abort))


async def sc_long(client, ctx):
    reqs = []
    for tag, length, n in LONG_CASES:
        await client.flush()
        reqs.append(await request(client, tag, ctx.long_ids[:length], sp(n)))
    reqs.append(await request(client, "after", ctx.prompts[4], sp(32)))
    return dict(requests=reqs, replay_mode="seq", info={})


async def sc_chunked_mix(client, ctx):
    """Short requests decoding while two long prompts (8-10 chunks of 64) join and prefill in between."""
    async def delayed(delay, tag, ids, n):
        await asyncio.sleep(delay)
        return await request(client, tag, ids, sp(n))

    await client.flush()
    coros = [delayed(0.0, f"short{i}", ctx.prompts[i], 48) for i in range(4)]
    coros += [delayed(0.03, "long600", ctx.long_ids[100:700], 32), delayed(0.06, "long500", ctx.long_ids[300:800], 32)]
    return dict(requests=list(await asyncio.gather(*coros)), replay_mode="concurrent", info={})


SCENARIOS = {
    "ddtree": [("batching", sc_batching), ("radix", sc_radix), ("stop", sc_stop), ("eos", sc_eos),
               ("abort", sc_abort), ("long", sc_long)],
    "chunked": [("long", sc_long), ("chunked_mix", sc_chunked_mix)],
}


def replay_scenarios(out_dir):
    """The plain phase: every recorded DDTREE scenario as one replay scenario (same order, flush first)."""
    out = []
    for phase in SCENARIOS:
        path = os.path.join(out_dir, f"{phase}.jsonl")
        for rec in map(json.loads, open(path)) if os.path.exists(path) else []:
            todo = [(i, r) for i, r in enumerate(rec.get("requests", [])) if r.get("replay")]

            async def replay(client, ctx, todo=todo, mode=rec.get("replay_mode", "seq")):
                await client.flush()
                def one(i, r):
                    return request(client, r["tag"], r["input_ids"], r["sampling_params"], src_idx=i)
                if mode == "concurrent":
                    return dict(requests=list(await asyncio.gather(*(one(i, r) for i, r in todo))))
                return dict(requests=[await one(i, r) for i, r in todo])

            out.append((f"{phase}/{rec['scenario']}", replay))
    return out


class Context:
    def __init__(self, pair):
        from transformers import AutoTokenizer

        sys.path.insert(0, os.path.join(ROOT, "benchmark"))
        from bench_e2e import PROMPTS

        self.tokenizer = tok = AutoTokenizer.from_pretrained(pair.target)
        self.eos = tok.eos_token_id
        self.prompts = [tok.encode(p) for p in PROMPTS]
        self.eos_prompts = [tok.encode(p) for p in EOS_PROMPTS]
        long_ids = tok.encode("\n".join(p + "pass\n" for p in PROMPTS))
        self.long_ids = (long_ids * (1 + 2 * CONTEXT // len(long_ids)))[: 2 * CONTEXT]

    def decode(self, ids):
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


def run_phase(phase: str, out_dir: str, fake: bool) -> None:
    from sglang_ddtree.fixtures import tiny_pair_path

    pair = tiny_pair_path()
    ctx = Context(pair)
    scenarios = replay_scenarios(out_dir) if phase == "plain" else SCENARIOS[phase]
    path = os.path.join(out_dir, f"{phase}.jsonl")
    t = time.perf_counter()
    client = FakeClient(pair, ctx.tokenizer, phase != "plain") if fake else EngineClient(engine_kwargs(phase, pair))
    print(f"[features] {phase}: engine up in {time.perf_counter() - t:.1f} s", flush=True)
    try:
        for name, fn in scenarios:
            t = time.perf_counter()
            rec = dict(phase=phase, scenario=name)
            try:
                rec.update(client.run(fn(client, ctx), SCENARIO_TIMEOUT_S))
            except BaseException as e:  # record, keep the file line; a hung engine ends the phase
                rec["error"] = traceback.format_exc()[-4000:]
                wedged = isinstance(e, (RequestTimeout, asyncio.TimeoutError, KeyboardInterrupt))
            else:
                wedged = False
            rec["elapsed_s"] = round(time.perf_counter() - t, 2)
            with open(path, "a") as f:
                f.write(json.dumps(rec, default=str) + "\n")
            print(f"[features] {phase}/{name}: {'ERROR' if 'error' in rec else 'ok'} in {rec['elapsed_s']} s",
                  flush=True)
            if wedged:
                print(f"[features] {phase}: stopping after a timeout in {name}", flush=True)
                break
    finally:
        client.shutdown()


# ---- test-side plumbing -------------------------------------------------------------------------
def subprocess_env(tmp_dir: str) -> dict:
    """Environment for engine/server subprocesses: this sglang_ddtree first on PYTHONPATH and, if no
    ``sglang.srt.plugins`` entry point names it, a dist-info declaring one (as scripts/device/*.sh do)."""
    from importlib.metadata import entry_points

    import sglang_ddtree

    paths = [os.path.dirname(os.path.dirname(os.path.abspath(sglang_ddtree.__file__)))]
    if not any(ep.value.startswith("sglang_ddtree.") for ep in entry_points(group="sglang.srt.plugins")):
        dist = os.path.join(tmp_dir, "ep", "sglang_ddtree-0.0.0.dev0.dist-info")
        os.makedirs(dist, exist_ok=True)
        with open(os.path.join(dist, "METADATA"), "w") as f:
            f.write("Metadata-Version: 2.1\nName: sglang-ddtree\nVersion: 0.0.0.dev0\n")
        with open(os.path.join(dist, "entry_points.txt"), "w") as f:
            f.write("[sglang.srt.plugins]\nddtree = sglang_ddtree.plugin:register\n")
        paths.insert(0, os.path.dirname(dist))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


class Runs:
    """The phases' records: ``scenario(phase, name)`` and ``plain(phase, name)`` (src index -> replay)."""

    def __init__(self, out_dir: str, logs: dict):
        self.logs, self.records = logs, {}
        for phase in ("ddtree", "chunked", "plain"):
            path = os.path.join(out_dir, f"{phase}.jsonl")
            for rec in map(json.loads, open(path)) if os.path.exists(path) else []:
                self.records[(phase, rec["scenario"])] = rec

    def _get(self, phase, name):
        rec = self.records.get((phase, name))
        log = self.logs.get(phase, "")[-6000:]
        assert rec is not None, f"phase {phase!r} recorded no scenario {name!r} (crash or timeout?). Log tail:\n{log}"
        assert "error" not in rec, f"{phase}/{name} raised:\n{rec['error']}\nLog tail:\n{log}"
        return rec

    def scenario(self, phase, name) -> list:
        return self._get(phase, name)["requests"]

    def info(self, phase, name) -> dict:
        return self._get(phase, name).get("info", {})

    def plain(self, phase, name) -> dict:
        return {r["src_idx"]: r for r in self._get("plain", f"{phase}/{name}")["requests"]}


def near_tie_failures(target, items, epsilon):
    """items: (label, prompt_ids, reference_ids, got_ids). Returns (failures, near_ties): a failure is a
    first divergence that is not a float32 near-tie (``analyze_divergence.analyse``, rule of
    |margin| < epsilon to the reference token, and the got token ranked <= 1 or itself within epsilon of the
    float32 best: then every token ranked above it ties with it too; session 44 met such a three-way tie on fa3
    with budget auto: margin 0.019, top-2 gap 0.011, the got token third), or outputs of different lengths that
    never diverge. A first divergence depends only on the prompt, the common prefix and the two
    tokens there, so each distinct one is analysed once (a soak repeats a few prompts thousands of times: one
    float32 forward per item took longer than the device call); a failure names how many items share it."""
    from unittest import mock

    from test_trained_pair_gpu import _load

    analyze = _load("analyze_divergence")
    items = [(label, list(p), list(ref), list(got)) for label, p, ref, got in items]
    failures = [f"{label}: same tokens but lengths {len(ref)} (reference) vs {len(got)}"
                for label, _, ref, got in items if ref[:len(got)] == got[:len(ref)] and len(ref) != len(got)]
    distinct = {}  # (prompt, prefix + reference token, got token) -> [first item, how many share it]
    for item in items:
        _, p, ref, got = item
        d = next((k for k, (a, b) in enumerate(zip(ref, got)) if a != b), None)
        if d is not None:
            distinct.setdefault((tuple(p), tuple(ref[:d + 1]), got[d]), [item, 0])[1] += 1
    unique = [v[0] for v in distinct.values()]
    report = {"results": [{"config": "plain", "by_bs": {"1": {"outputs": [i[2] for i in unique]}}},
                          {"config": "candidate", "by_bs": {"1": {"outputs": [i[3] for i in unique]}}}]}
    import torch

    with mock.patch.object(analyze, "_prompts", lambda _report: [i[1] for i in unique]), torch.no_grad():
        cases = analyze.analyse(report, target, epsilon)["configs"]["candidate bs 1"]["cases"] if unique else []
    shared = [v[1] for v in distinct.values()]
    for case in cases:
        if abs(case["margin"]) >= epsilon or (case["speculative_token_rank"] > 1 and case["top_margin"] >= epsilon):
            failures.append(f"{unique[case['prompt']][0]} (and {shared[case['prompt']] - 1} more items with the "
                            f"same first divergence): {case}")
    return failures, sum(shared[case["prompt"]] for case in cases)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phase", required=True, choices=["ddtree", "chunked", "plain"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--fake", action="store_true", help="CPU dry run with the float32 reference target")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    run_phase(args.phase, args.out, args.fake)
    return 0


if __name__ == "__main__":
    sys.exit(main())
