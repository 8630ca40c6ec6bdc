#!/usr/bin/env python3
"""Draw many T > 0 samples of the first generated tokens, with the plain engine and with DDTREE.

For each configuration one ``sglang.Engine`` (settings ``COMMON`` of ``benchmark/bench_e2e.py``) is
started in this process (SGLang spawns its scheduler, so run this file as a script). For every sampling
setting and prompt it submits ``--num-samples`` copies of the prompt in batches of ``--batch`` and keeps
the first ``--tokens`` output ids of each (``ignore_eos``). Writes one JSON file that
``test/worker/test_sampling_gpu.py`` compares.

Seeds: SGLang 0.5.16 honours a per-request ``sampling_seed`` only with ``--enable-deterministic-inference``
(plain sampler, pytorch backend), and tree sampling draws its coins with ``torch.rand`` regardless, so
requests are left unseeded and each engine gets a fixed ``random_seed`` instead; every request of a
batch is an independent draw.

    python scripts/device/sampling_dist.py --target T --draft D --out /tmp/sampling.json \
        [--configs plain,ddtree:16:4] [--num-samples 2000] [--attention-backend triton] [--settings t0.7,t0.7_k20]
Samples per setting: ``samples[setting][j]`` for the j-th prompt of ``SETTING_PROMPTS[setting]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmark"))
from bench_e2e import COMMON, engine_kwargs, environment  # noqa: E402

# Prompts whose first-token distribution at T = 0.7 is spread out on the tiny pair (float32 entropy
# 1.7-2.8 nats, top token 0.29-0.41), so a shifted distribution has room to show.
# Prompts 3 and 4 are for the top-p settings: in float32 every top-p / top-k boundary their first two
# tokens meet is far from the threshold (cumulative mass >= 0.086 away from top_p - 8x the 0.011 margin that
# bf16 rounding flipped on the H200 - and the top-k cut between probabilities >= 1.5x apart), so the kept
# sets should not depend on rounding (see test_sampling_gpu.py).
PROMPTS = [
    "def fibonacci(n):\n    ",
    "    def __eq__(self, other):\n        if not isinstance(other, ",
    "if __name__ == \"__main__\":\n    ",
    "    for i in range(len(items)):\n        if ",
    "    if not isinstance(name, str):\n        raise TypeError(",
]
SETTINGS = {
    "t0.7": dict(temperature=0.7),
    "t0.7_k20": dict(temperature=0.7, top_k=20),
    "t0.7_p0.7": dict(temperature=0.7, top_p=0.7),
    "t0.7_p0.85_k2": dict(temperature=0.7, top_p=0.85, top_k=2),
}
SETTING_PROMPTS = {"t0.7": [0, 1, 2], "t0.7_k20": [0, 1, 2], "t0.7_p0.7": [3], "t0.7_p0.85_k2": [4]}


def run_config(spec: str, args, prompts) -> dict:
    import sglang

    t0 = time.time()
    engine = sglang.Engine(model_path=args.target, random_seed=args.seed,
                           **{**COMMON, **engine_kwargs(spec, args.draft, args.attention_backend)},
                           tp_size=args.tp_size)
    rec = {"config": spec, "start_s": round(time.time() - t0, 1), "samples": {}, "mean_accept_length": {}}
    try:
        engine.generate(input_ids=prompts[:1], sampling_params=dict(temperature=0.7, max_new_tokens=4))  # warm-up
        for name in args.settings:
            setting = SETTINGS[name]
            params = dict(setting, max_new_tokens=args.tokens, ignore_eos=True)
            rec["samples"][name], accepts = [], []
            for ids in (prompts[i] for i in SETTING_PROMPTS[name]):
                draws = []
                for s in range(0, args.num_samples, args.batch):
                    n = min(args.batch, args.num_samples - s)
                    for r in engine.generate(input_ids=[ids] * n, sampling_params=params):
                        draws.append(list(r["output_ids"])[: args.tokens])
                        accepts.append(r["meta_info"].get("spec_accept_length"))
                rec["samples"][name].append(draws)
            acc = [a for a in accepts if a is not None]
            rec["mean_accept_length"][name] = round(sum(acc) / len(acc), 3) if acc else None
    finally:
        engine.shutdown()
    rec["wall_s"] = round(time.time() - t0, 1)
    return rec


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--configs", default="plain,ddtree:16:4")
    ap.add_argument("--num-samples", type=int, default=2000, help="requests per prompt and setting")
    ap.add_argument("--batch", type=int, default=1000, help="requests per generate call")
    ap.add_argument("--tokens", type=int, default=3, help="generated tokens kept per request")
    ap.add_argument("--seed", type=int, default=1234, help="engine random_seed")
    ap.add_argument("--attention-backend", default="triton")
    ap.add_argument("--tp-size", type=int, default=1, help="tensor-parallel size of every engine")
    ap.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated subset of {list(SETTINGS)}")
    ap.add_argument("--cycle-budgets", action="store_true",
                    help="budget auto: load the TEST-ONLY plugin's DDTREE_TEST_CYCLE_BUDGETS hook (test/_test_plugin), "
                         "so every round verifies the next bucket of a fixed cycle (the width changes every round)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.cycle_budgets:
        sys.path.insert(0, os.path.join(ROOT, "test", "worker"))
        import _test_plugin_env

        _test_plugin_env.add_plugin_path()
        os.environ.update({k: v for k, v in _test_plugin_env.plugin_env(cycle_budgets=True).items() if k != "PYTHONPATH"})
    args.settings = args.settings.split(",")
    unknown = [s for s in args.settings if s not in SETTINGS]
    if unknown:
        ap.error(f"--settings: unknown {unknown}; choose from {list(SETTINGS)}")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.target)
    prompts = [tok.encode(p) for p in PROMPTS]
    report = {"environment": environment(argv),
              "settings": {**COMMON, "attention_backend": args.attention_backend, "tp_size": args.tp_size,
                           "target": args.target, "draft": args.draft, "num_samples": args.num_samples,
                           "tokens": args.tokens, "seed": args.seed,
                           "sampling": {name: SETTINGS[name] for name in args.settings},
                           "setting_prompts": {name: SETTING_PROMPTS[name] for name in args.settings}},
              "prompts": PROMPTS, "prompt_ids": prompts, "results": []}
    for spec in args.configs.split(","):
        print(f"[sampling_dist] {spec}", flush=True)
        try:
            rec = run_config(spec, args, prompts)
        except Exception as e:  # record and go on with the next configuration
            import traceback

            rec = {"config": spec, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        print(f"[sampling_dist] {spec}: {json.dumps({k: v for k, v in rec.items() if k != 'samples'})}", flush=True)
        report["results"].append(rec)
        with open(args.out, "w") as f:
            json.dump(report, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
