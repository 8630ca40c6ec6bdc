#!/usr/bin/env python3
"""Shadow comparison: the same greedy requests to a baseline and a candidate SGLang endpoint, outputs compared.

For rolling DDTREE out: replay one request set (``bench_serving``'s prompts: ``bench_e2e.PROMPTS`` or
``--prompts FILE.jsonl``) to ``--baseline URL``, then to ``--candidate URL``, ``--concurrency`` requests in
flight, temperature 0, and check every output token for token: the ``output_ids`` that SGLang 0.5.16's
native ``/generate`` returns beside ``text`` (in every streamed chunk); where a server returns no ids, the
texts are compared instead, and the report says so. Each divergence is reported with its request index,
the first differing output position and the tokens around it; then throughput and latency of both, the
candidate / baseline ratios and one verdict line. Only the two given servers are contacted (``/health``,
``/generate``; http.client, no proxies).

    python benchmark/shadow_compare.py --baseline http://127.0.0.1:30000 --candidate http://127.0.0.1:30001 \
        [--concurrency 8] [--num-requests 96] [--max-new-tokens 128] [--prompts FILE.jsonl] [--out report.json]
Greedy outputs of one server can differ between batch compositions (batch-dependent kernels), so a
divergence at ``--concurrency`` > 1 may be the baseline's own: rerun at 1, or compare the baseline with
itself. ``--ignore-eos`` compares ``--max-new-tokens`` tokens of every request; by default each stops at EOS
as served. Exit codes: 0 every output identical, 1 a divergence, 2 bad arguments, an endpoint unreachable
at start, or a failed request (and no divergence).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_serving as bs  # noqa: E402


def first_difference(a: Sequence, b: Sequence) -> Optional[int]:
    """Index of the first element that differs, the shorter length if one is a prefix of the other, else None."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(i: int, n_prompts: int, base: bs.RequestResult, cand: bs.RequestResult, context: int) -> Optional[dict]:
    """The divergence of request ``i`` (None when identical): by output ids where both returned them."""
    by_ids = base.output_ids is not None and cand.output_ids is not None
    a, b = (base.output_ids, cand.output_ids) if by_ids else (base.text, cand.text)
    pos = first_difference(a, b)
    if pos is None:
        return None
    lo = max(0, pos - context)
    return {"request": i, "prompt": i % n_prompts, "compared": "output_ids" if by_ids else "text",
            "position": pos, "baseline_len": len(a), "candidate_len": len(b), "around_start": lo,
            "baseline_around": a[lo : pos + context + 1], "candidate_around": b[lo : pos + context + 1]}


def _marked(seq, lo: int, pos: int) -> str:
    if isinstance(seq, str):
        k = pos - lo
        return repr(seq[:k]) + " >>" + repr(seq[k:])
    return " ".join(f"[{t}]" if lo + j == pos else str(t) for j, t in enumerate(seq)) + (
        " [end]" if lo + len(seq) == pos else "")


def describe(d: dict) -> str:
    unit = "token" if d["compared"] == "output_ids" else "character"
    at, lo = d["position"], d["around_start"]
    return (f"request {d['request']} (prompt {d['prompt']}): first difference at output {unit} {at} "
            f"(lengths {d['baseline_len']} / {d['candidate_len']})\n"
            f"    baseline  [{lo}:]: {_marked(d['baseline_around'], lo, at)}\n"
            f"    candidate [{lo}:]: {_marked(d['candidate_around'], lo, at)}")


def build_parser() -> argparse.ArgumentParser:
    ap = bs.OneLineParser(prog="shadow_compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, metavar="URL")
    ap.add_argument("--candidate", required=True, metavar="URL")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--num-requests", type=int, default=None, help="default: one per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=False)
    ap.add_argument("--prompts", help='JSONL, one {"prompt": str} or {"input_ids": [int]} a line')
    ap.add_argument("--context", type=int, default=4, help="tokens shown either side of a divergence")
    ap.add_argument("--max-report", type=int, default=20, help="divergences printed (all go to --out)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    ap.add_argument("--api-key")
    ap.add_argument("--out", help="the JSON report")
    return ap


def _phase_line(name: str, m: dict) -> str:
    return (f"{name}: {m['output_tok_s']:.1f} tok/s, {m['request_per_s']:.2f} req/s, TTFT p50/p99 "
            f"{m['ttft_ms']['p50']}/{m['ttft_ms']['p99']} ms, TPOT p50/p99 {m['tpot_ms']['p50']}/"
            f"{m['tpot_ms']['p99']} ms, accept {m['mean_accept_length']}, errors {m['errors']}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    try:
        base_ep, cand_ep = bs.parse_url(args.baseline, "baseline"), bs.parse_url(args.candidate, "candidate")
        for flag, v in (("--concurrency", args.concurrency), ("--max-new-tokens", args.max_new_tokens),
                        ("--num-requests", args.num_requests), ("--max-report", args.max_report)):
            if v is not None and v < 1:
                raise bs.UsageError(f"{flag} {v}: must be >= 1")
        if args.context < 0 or args.timeout <= 0:
            raise bs.UsageError("--context must be >= 0 and --timeout > 0")
        prompts = bs.load_prompts(args.prompts)
        for ep in (base_ep, cand_ep):
            bs.check_health(ep, min(args.timeout, 60.0), args.api_key)
    except bs.UsageError as e:
        print(f"shadow_compare: error: {e}", file=sys.stderr)
        return 2
    n = args.num_requests or len(prompts)
    payloads = [bs.make_payload(prompts[i % len(prompts)], args.max_new_tokens, 0.0, args.ignore_eos)
                for i in range(n)]
    runs = {}
    for ep in (base_ep, cand_ep):
        runs[ep.name] = bs.run_requests(ep, payloads, args.concurrency, args.timeout, args.api_key)
        print(_phase_line(ep.name, bs.summarize([runs[ep.name]], [])), flush=True)
    (base_res, _), (cand_res, _) = runs["baseline"], runs["candidate"]
    failures, divergences = [], []
    for i, (b, c) in enumerate(zip(base_res, cand_res)):
        if b.error or c.error:
            failures.append({"request": i, "baseline_error": b.error, "candidate_error": c.error})
        elif (d := compare(i, len(prompts), b, c, args.context)) is not None:
            divergences.append(d)
    for d in divergences[: args.max_report]:
        print(describe(d))
    if len(divergences) > args.max_report:
        print(f"... {len(divergences) - args.max_report} more divergences (see --out)")
    for f in failures[: args.max_report]:
        print(f"request {f['request']} failed: baseline {f['baseline_error']}, candidate {f['candidate_error']}")
    by_text = sum(1 for b, c in zip(base_res, cand_res) if not (b.error or c.error)
                  and (b.output_ids is None or c.output_ids is None))
    if by_text:
        print(f"note: {by_text} request(s) compared by text: the server returned no output_ids")
    summary = {name: bs.summarize([run], []) for name, run in runs.items()}
    ratios = {"output_tok_s": bs.ratio(summary["candidate"]["output_tok_s"], summary["baseline"]["output_tok_s"]),
              "request_per_s": bs.ratio(summary["candidate"]["request_per_s"], summary["baseline"]["request_per_s"]),
              **{f"{k}_{q}": bs.ratio(summary["candidate"][f"{k}_ms"][q], summary["baseline"][f"{k}_ms"][q])
                 for k in ("ttft", "tpot", "latency") for q in ("p50", "p99")}}
    print("candidate / baseline: " + ", ".join(f"{k} {v}x" for k, v in ratios.items()))
    compared = n - len(failures)
    tokens = sum(len(b.output_ids or ()) for b, c in zip(base_res, cand_res) if not (b.error or c.error))
    if divergences:
        first = divergences[0]
        verdict, code = (f"DIVERGED: {len(divergences)}/{compared} requests differ (first: request "
                         f"{first['request']} at output position {first['position']})"), 1
    elif failures:
        verdict, code = f"INCOMPLETE: {len(failures)}/{n} requests failed; the other {compared} identical", 2
    else:
        verdict, code = f"IDENTICAL: {n}/{n} requests, {tokens} output tokens", 0
    print(f"VERDICT: {verdict}", flush=True)
    if args.out:
        report = {"command": " ".join([os.path.basename(sys.executable), sys.argv[0]] + argv),
                  "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "settings": {"baseline": base_ep.url, "candidate": cand_ep.url, "concurrency": args.concurrency,
                               "requests": n, "max_new_tokens": args.max_new_tokens, "temperature": 0.0,
                               "ignore_eos": args.ignore_eos, "prompts": args.prompts or "bench_e2e.PROMPTS"},
                  "summary": summary, "ratios": ratios, "divergences": divergences, "failures": failures,
                  "compared_by_text": by_text, "verdict": verdict, "exit_code": code}
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return code


if __name__ == "__main__":
    sys.exit(main())
