#!/usr/bin/env python3
"""Shadow comparison: the same greedy requests to a baseline and a candidate SGLang endpoint, outputs compared.

For rolling DDTREE out: replay one request set (``bench_serving``'s prompts: ``bench_e2e.PROMPTS`` or
``--prompts FILE.jsonl``) to ``--baseline URL``, then to ``--candidate URL``, ``--concurrency`` requests in
flight, temperature 0, and check every output token for token: the ``output_ids`` that SGLang 0.5.16's
native ``/generate`` returns beside ``text`` (in every streamed chunk); where a server returns no ids, the
texts are compared instead, and the report says so. Each divergence is reported with its request index,
the first differing output position and the tokens around it; then throughput and latency of both, the
candidate / baseline ratios and one verdict line. Only the given servers are contacted (``/health``,
``/generate``; http.client, no proxies).

    python benchmark/shadow_compare.py --baseline http://127.0.0.1:30000 --candidate http://127.0.0.1:30001 \
        [--concurrency 8] [--num-requests 96] [--max-new-tokens 128] [--prompts FILE.jsonl] [--out report.json] \
        [--reference http://127.0.0.1:30002 [--tie-eps 0.2]]
Greedy outputs of one server can differ between batch compositions (batch-dependent kernels), so a
divergence at ``--concurrency`` > 1 may be the baseline's own: rerun at 1, or compare the baseline with
itself. ``--ignore-eos`` compares ``--max-new-tokens`` tokens of every request; by default each stops at EOS
as served.

Near-ties: two correct servers can pick different tokens where the target's two best tokens are almost equally
likely (bf16 rounding differs between a verify forward and a decode step; on the trained tiny pair DFLASH alone
diverges from plain decoding in 10 of 16 prompts that way). ``--reference URL``, a server of the same target
WITHOUT speculative decoding (DFLASH and DDTREE refuse ``return_logprob``), classifies each divergence: after the
prompt and the common output prefix it asks the reference (``/generate``, one token, ``return_logprob``,
``token_ids_logprob`` = both tokens) for the log-probabilities of the baseline's and the candidate's token, and
calls the divergence a near-tie when both lie within ``--tie-eps`` of the reference's own greedy token (default
0.2: the largest gap our GPU parity runs saw between attention backends on the trained tiny pair was 0.194). A divergence where one
output ended, or compared by text, cannot be classified. Exit codes: 0 every output identical, or with
``--reference`` every divergence a near-tie; 1 another divergence; 2 bad arguments, an endpoint unreachable at
start, or a failed request (and no divergence).
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


def _post_json(ep: bs.Endpoint, payload: dict, timeout: float, api_key: Optional[str]) -> dict:
    """One non-streamed /generate; its meta_info, or ValueError with the server's answer."""
    res = bs.generate(ep, dict(payload, stream=False), timeout, api_key)
    if res.error:
        raise ValueError(res.error)
    return res.meta


def reference_view(ref: bs.Endpoint, prompt: dict, base_ids: Sequence[int], cand_ids: Sequence[int], pos: int,
                   tie_eps: float, timeout: float, api_key: Optional[str] = None) -> dict:
    """The reference server's log-probabilities of the baseline's and the candidate's token at output ``pos``,
    after the prompt and the common prefix ``base_ids[:pos]``; ``gap``: how far the lower of the two lies below the
    reference's greedy token; ``near_tie`` when that is <= ``tie_eps``.
    ``{"unclassified": why}`` where one output ended at ``pos`` or the reference did not answer."""
    if pos >= len(base_ids) or pos >= len(cand_ids):
        return {"unclassified": "one output ended at this position"}
    b, c = int(base_ids[pos]), int(cand_ids[pos])
    greedy = {"max_new_tokens": 1, "temperature": 0.0}
    try:
        if "input_ids" in prompt:
            ids = [int(t) for t in prompt["input_ids"]]
        else:  # the reference's own tokenization of the text prompt: its input log-probs carry the token ids
            meta = _post_json(ref, {"text": prompt["text"], "sampling_params": greedy, "return_logprob": True,
                                    "logprob_start_len": 0}, timeout, api_key)
            ids = [int(t[1]) for t in meta["input_token_logprobs"]]
        meta = _post_json(ref, {"input_ids": ids + [int(t) for t in base_ids[:pos]], "sampling_params": greedy,
                                "return_logprob": True, "token_ids_logprob": [b, c]}, timeout, api_key)
        lp = {int(t[1]): float(t[0]) for t in meta["output_token_ids_logprobs"][0]}
        top_lp, top_id = meta["output_token_logprobs"][0][:2]
        # how far the worse of the two falls below the reference's own greedy token (lp(b) - lp(c) when the
        # reference picks b): a near-tie only if both are within tie_eps of the best, not merely of each other
        gap = max(0.0, float(top_lp) - min(lp[b], lp[c]))
    except (ValueError, KeyError, IndexError, TypeError) as e:
        return {"unclassified": f"reference {ref.url}: {type(e).__name__}: {e}"[:300]}
    return {"baseline_token": b, "candidate_token": c, "baseline_logprob": round(lp[b], 5),
            "candidate_logprob": round(lp[c], 5), "gap": round(gap, 5), "near_tie": gap <= tie_eps,
            "reference_token": int(top_id), "reference_logprob": round(float(top_lp), 5)}


def _marked(seq, lo: int, pos: int) -> str:
    if isinstance(seq, str):
        k = pos - lo
        return repr(seq[:k]) + " >>" + repr(seq[k:])
    return " ".join(f"[{t}]" if lo + j == pos else str(t) for j, t in enumerate(seq)) + (
        " [end]" if lo + len(seq) == pos else "")


def describe(d: dict) -> str:
    unit = "token" if d["compared"] == "output_ids" else "character"
    at, lo = d["position"], d["around_start"]
    text = (f"request {d['request']} (prompt {d['prompt']}): first difference at output {unit} {at} "
            f"(lengths {d['baseline_len']} / {d['candidate_len']})\n"
            f"    baseline  [{lo}:]: {_marked(d['baseline_around'], lo, at)}\n"
            f"    candidate [{lo}:]: {_marked(d['candidate_around'], lo, at)}")
    ref = d.get("reference")
    if ref is None:
        return text
    if "unclassified" in ref:
        return text + f"\n    reference: not classified ({ref['unclassified']})"
    return text + (f"\n    reference: log-prob baseline {ref['baseline_logprob']} / candidate {ref['candidate_logprob']} "
                   f"(gap {ref['gap']}: {'near-tie' if ref['near_tie'] else 'NOT a near-tie'}); its own greedy "
                   f"token {ref['reference_token']}")


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
    ap.add_argument("--reference", metavar="URL", help="a server of the same target without speculative decoding: "
                    "classifies each divergence by its log-probabilities (near-tie or not)")
    ap.add_argument("--tie-eps", type=float, default=0.2,
                    help="a divergence is a near-tie when both tokens' reference log-probs are within this of its best")
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
        if not args.tie_eps >= 0:
            raise bs.UsageError(f"--tie-eps {args.tie_eps}: must be >= 0")
        ref_ep = bs.parse_url(args.reference, "reference") if args.reference else None
        prompts = bs.load_prompts(args.prompts)
        for ep in (base_ep, cand_ep) + ((ref_ep,) if ref_ep else ()):
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
    if ref_ep is not None:  # one at a time, after both runs: the reference sees no other load
        for d in divergences:
            b, c = base_res[d["request"]], cand_res[d["request"]]
            d["reference"] = (reference_view(ref_ep, prompts[d["prompt"]], b.output_ids, c.output_ids, d["position"],
                                             args.tie_eps, args.timeout, args.api_key)
                              if d["compared"] == "output_ids" else {"unclassified": "compared by text"})
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
    ties = [d for d in divergences if d.get("reference", {}).get("near_tie")]
    if divergences and ref_ep is not None and len(ties) == len(divergences):
        up_to = (f"{len(divergences)}/{compared} requests differ, each at a near-tie of the reference (log-prob gap "
                 f"<= {args.tie_eps}, largest {max(d['reference']['gap'] for d in ties)})")
        verdict, code = ((f"INCOMPLETE: {len(failures)}/{n} requests failed; of the other {compared}, {up_to}", 2)
                         if failures else (f"IDENTICAL UP TO NEAR-TIES: {up_to}", 0))
    elif divergences:
        first = divergences[0]
        verdict, code = (f"DIVERGED: {len(divergences)}/{compared} requests differ (first: request "
                         f"{first['request']} at output position {first['position']})"), 1
        if ref_ep is not None:
            not_ties = sum(1 for d in divergences if d["reference"].get("near_tie") is False)
            verdict += (f"; reference: {len(ties)} near-ties, {not_ties} beyond --tie-eps {args.tie_eps}, "
                        f"{len(divergences) - len(ties) - not_ties} not classified")
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
                               "ignore_eos": args.ignore_eos, "prompts": args.prompts or "bench_e2e.PROMPTS",
                               "reference": ref_ep.url if ref_ep else None, "tie_eps": args.tie_eps},
                  "summary": summary, "ratios": ratios, "divergences": divergences, "failures": failures,
                  "compared_by_text": by_text, "verdict": verdict, "exit_code": code}
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return code


if __name__ == "__main__":
    sys.exit(main())
