#!/usr/bin/env python3
"""Serving benchmark over running SGLang HTTP endpoints: a concurrency sweep of streamed ``/generate`` requests.

For rolling DDTREE out beside what serves today: every endpoint (``--endpoint NAME=URL``, repeatable; the
first is the baseline of the ratios unless ``--baseline NAME``) gets the same requests at each concurrency
level, closed loop (``c`` requests in flight; the next one goes out when one ends). Within a level the
endpoints run one after another, in an order rotated by level and repetition (paired alternation), so drift
of the machine lands on all of them alike. Per endpoint and level: output tok/s and requests/s over the
level's wall clock, TTFT and TPOT = (latency - TTFT) / (output tokens - 1), p50 / p99 over the requests of
all repetitions, mean accept length (sum of ``completion_tokens`` / sum of ``spec_verify_ct`` from
``meta_info``, upstream's definition, bonus token included) with the accept-length histogram of the
requests' ``spec_correct_drafts_histogram``, and, where ``/metrics`` answers, the server's counters over the
level (``sglang:ddtree_accept_length_total`` by accept length, generation tokens / verify calls). Ratios are
endpoint / baseline (output tok/s: the median of per-repetition ratios). Standard library only for HTTP.

    python benchmark/bench_serving.py --endpoint dflash=http://127.0.0.1:30000 \
        --endpoint ddtree=http://127.0.0.1:30001 --concurrency 1,2,4,8,16,32,64 --max-new-tokens 256 \
        --repeats 3 --out benchmark/results/serving.json [--plot-dir D] [--prompts FILE.jsonl]
    python benchmark/bench_serving.py --plot benchmark/results/serving.json --plot-dir D
Prompts: ``bench_e2e.PROMPTS`` (short code prompts) or ``--prompts FILE.jsonl`` with ``{"prompt": "..."}``
or ``{"input_ids": [...]}`` per line; request i of a level uses prompt i mod P, the same on every endpoint.
Prompts repeat, so the radix cache serves their prefill after the warm-up (start the servers with
``--disable-radix-cache`` to time uncached prefill). Greedy (``--temperature 0``) and ``ignore_eos`` by
default (``--no-ignore-eos``), so every endpoint decodes the same tokens. TTFT includes the TCP connect
(one connection per request). Exit codes: 0 done (failed requests are counted per level, ``errors``),
2 bad arguments or an endpoint unreachable at start.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import http.client
import json
import math
import os
import platform
import re
import statistics
import sys
import time
import urllib.parse
from typing import Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_e2e import PROMPTS  # noqa: E402

# Counters read from /metrics (Prometheus text): upstream's in sglang/srt/observability/metrics_collector.py,
# ours in sglang_ddtree/worker/metrics.py (Counter "sglang:ddtree_accept_length" -> the _total sample).
ACCEPT_COUNTER = "sglang:ddtree_accept_length_total"
GEN_TOKENS_COUNTER = "sglang:generation_tokens_total"
VERIFY_COUNTER = "sglang:spec_verify_calls_total"
SERVER_INFO_KEYS = ("version", "model_path", "served_model_name", "tp_size", "dp_size", "attention_backend",
                    "disable_cuda_graph", "disable_overlap_schedule", "disable_radix_cache", "stream_interval",
                    "incremental_streaming_output", "skip_tokenizer_init", "enable_metrics")


class UsageError(Exception):
    """Bad arguments or an unreachable endpoint: one line on stderr, exit code 2."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# ---- HTTP (http.client: no proxies, no other host than the endpoint's) --------------------------------
@dataclasses.dataclass(frozen=True)
class Endpoint:
    name: str
    url: str  # as given, without a trailing slash
    host: str
    port: int
    https: bool
    prefix: str  # path before /generate, "" for a server at the root


def parse_url(url: str, name: str = "") -> Endpoint:
    u = urllib.parse.urlsplit(url.strip())
    if u.scheme not in ("http", "https") or not u.hostname:
        raise UsageError(f"endpoint {name or url!r}: URL must look like http://HOST[:PORT], got {url!r}")
    try:
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        raise UsageError(f"endpoint {name or url!r}: bad port in {url!r}") from None
    return Endpoint(name, url.strip().rstrip("/"), u.hostname, port, u.scheme == "https", u.path.rstrip("/"))


def parse_endpoint(spec: str) -> Endpoint:
    name, sep, url = spec.partition("=")
    if not sep or not name or not url:
        raise UsageError(f"--endpoint {spec!r}: use NAME=URL, e.g. ddtree=http://127.0.0.1:30000")
    return parse_url(url, name)


def _connection(ep: Endpoint, timeout: float) -> http.client.HTTPConnection:
    cls = http.client.HTTPSConnection if ep.https else http.client.HTTPConnection
    return cls(ep.host, ep.port, timeout=timeout)


def _headers(api_key: Optional[str], body: bool) -> dict:
    h = {"Content-Type": "application/json"} if body else {}
    if api_key:
        h["Authorization"] = f"Bearer {api_key}"
    return h


def http_get(ep: Endpoint, path: str, timeout: float, api_key: Optional[str] = None) -> Tuple[int, bytes]:
    conn = _connection(ep, timeout)
    try:
        conn.request("GET", ep.prefix + path, headers=_headers(api_key, False))
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def check_health(ep: Endpoint, timeout: float, api_key: Optional[str] = None) -> None:
    """GET /health must answer 200 (SGLang 0.5.16 generates one token there when idle)."""
    try:
        status, _ = http_get(ep, "/health", timeout, api_key)
    except (OSError, http.client.HTTPException) as e:
        reason = str(e) or type(e).__name__
        raise UsageError(f"endpoint {ep.name or ep.url}: {ep.url}/health unreachable: {reason}") from None
    if status != 200:
        raise UsageError(f"endpoint {ep.name or ep.url}: {ep.url}/health answered HTTP {status}, not 200")


# ---- prompts and requests ----------------------------------------------------------------------------
def load_prompts(path: Optional[str]) -> List[dict]:
    """``[{"text": ...} | {"input_ids": [...]}]``: the built-in prompts, or one JSON object a line of ``path``."""
    if path is None:
        return [{"text": p} for p in PROMPTS]
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise UsageError(f"--prompts {path}: {e.strerror or e}") from None
    out = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise UsageError(f"--prompts {path}:{no}: not JSON ({e})") from None
        if isinstance(obj, dict) and isinstance(obj.get("prompt"), str):
            out.append({"text": obj["prompt"]})
        elif (isinstance(obj, dict) and isinstance(obj.get("input_ids"), list) and obj["input_ids"]
              and all(isinstance(t, int) for t in obj["input_ids"])):
            out.append({"input_ids": obj["input_ids"]})
        else:
            raise UsageError(f'--prompts {path}:{no}: need {{"prompt": "..."}} or {{"input_ids": [ints]}}')
    if not out:
        raise UsageError(f"--prompts {path}: no prompts")
    return out


def make_payload(prompt: dict, max_new_tokens: int, temperature: float, ignore_eos: bool, stream: bool = True) -> dict:
    """SGLang's native ``GenerateReqInput`` (sglang/srt/managers/io_struct.py) for one prompt."""
    params = {"max_new_tokens": max_new_tokens, "temperature": temperature, "ignore_eos": ignore_eos}
    return {**prompt, "sampling_params": params, "stream": stream}


@dataclasses.dataclass
class RequestResult:
    error: Optional[str] = None
    latency_s: float = 0.0
    ttft_s: Optional[float] = None  # first chunk that carries an output token; None when not streamed
    output_ids: Optional[List[int]] = None  # None when the server returned no ids
    text: str = ""
    meta: dict = dataclasses.field(default_factory=dict)  # the last chunk's meta_info

    @property
    def completion_tokens(self) -> int:
        n = self.meta.get("completion_tokens")
        return int(n) if n is not None else len(self.output_ids or ())

    @property
    def tpot_s(self) -> Optional[float]:
        n = self.completion_tokens
        return (self.latency_s - self.ttft_s) / (n - 1) if self.ttft_s is not None and n > 1 else None


def merge_chunk(res: RequestResult, chunk: dict) -> None:
    """Fold one streamed chunk into ``res``. SGLang 0.5.16 sends the whole output so far in every chunk
    (``output_ids``, ``text``); with ``--incremental-streaming-output`` only the new part. ``meta_info``'s
    ``completion_tokens`` is the running total in both, which tells them apart."""
    meta = chunk.get("meta_info") or {}
    ids, text, n = chunk.get("output_ids"), chunk.get("text"), meta.get("completion_tokens")
    if ids is not None:
        ids = list(ids)
        old = res.output_ids or []
        cumulative = len(ids) == n if n is not None else ids[: len(old)] == old
        res.output_ids = ids if cumulative else old + ids
    else:
        cumulative = text is not None and text.startswith(res.text)
    if text is not None:
        res.text = text if cumulative else res.text + text
    res.meta = meta or res.meta


def _error_of(chunk: dict) -> Optional[str]:
    if "error" in chunk:
        err = chunk["error"]
        return f"server error: {err.get('message', err) if isinstance(err, dict) else err}"
    reason = (chunk.get("meta_info") or {}).get("finish_reason")
    if isinstance(reason, dict) and reason.get("type") == "abort":
        return f"aborted: {reason.get('message', reason)}"
    return None


def generate(ep: Endpoint, payload: dict, timeout: float, api_key: Optional[str] = None) -> RequestResult:
    """POST /generate; a streamed answer is ``data: {json}`` lines ending with ``data: [DONE]`` (SSE)."""
    res, t0 = RequestResult(), time.perf_counter()
    conn = _connection(ep, timeout)
    try:
        conn.request("POST", ep.prefix + "/generate", body=json.dumps(payload).encode(),
                     headers=_headers(api_key, True))
        resp = conn.getresponse()
        if resp.status != 200:
            res.error = f"HTTP {resp.status}: {resp.read()[:200].decode(errors='replace').strip()}"
        elif not payload.get("stream"):
            chunk = json.loads(resp.read())
            chunk = chunk[0] if isinstance(chunk, list) else chunk
            res.error = _error_of(chunk)
            merge_chunk(res, chunk)
        else:
            done = False
            for raw in resp:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    resp.read()  # the closing chunk: a close with unread bytes would reset the connection
                    done = True
                    break
                chunk = json.loads(data)
                res.error = res.error or _error_of(chunk)
                merge_chunk(res, chunk)
                if res.ttft_s is None and (res.output_ids or res.text):
                    res.ttft_s = time.perf_counter() - t0
            if not done:
                res.error = res.error or "the stream ended before data: [DONE]"
    except (OSError, http.client.HTTPException, ValueError) as e:
        res.error = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    res.latency_s = time.perf_counter() - t0
    return res


def run_requests(ep: Endpoint, payloads: Sequence[dict], concurrency: int, timeout: float,
                 api_key: Optional[str] = None) -> Tuple[List[RequestResult], float]:
    """At most ``concurrency`` requests in flight; results in ``payloads`` order and the wall clock."""
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(lambda p: generate(ep, p, timeout, api_key), payloads))
    return results, time.perf_counter() - t0


# ---- /metrics (Prometheus text format) ----------------------------------------------------------------
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def parse_prometheus(text: str) -> List[Tuple[str, Dict[str, str], float]]:
    """Samples ``(name, labels, value)`` of an exposition; comments and malformed lines are skipped."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if not m or line.startswith("#"):
            continue
        labels = {k: re.sub(r"\\[\\\"n]", lambda e: _UNESCAPE[e.group(0)], v)
                  for k, v in _LABEL.findall(m.group(2) or "")}
        try:
            out.append((m.group(1), labels, float(m.group(3))))
        except ValueError:
            continue
    return out


def metrics_snapshot(ep: Endpoint, timeout: float, api_key: Optional[str] = None) -> Optional[dict]:
    """The counters this benchmark reads, summed over other label sets; None without /metrics."""
    try:
        status, body = http_get(ep, "/metrics", timeout, api_key)
    except (OSError, http.client.HTTPException):
        return None
    if status != 200:
        return None
    snap = {"accept": {}, "gen_tokens": 0.0, "verify_calls": 0.0}
    for name, labels, value in parse_prometheus(body.decode(errors="replace")):
        if name == ACCEPT_COUNTER and "accept_length" in labels:
            snap["accept"][labels["accept_length"]] = snap["accept"].get(labels["accept_length"], 0.0) + value
        elif name == GEN_TOKENS_COUNTER:
            snap["gen_tokens"] += value
        elif name == VERIFY_COUNTER:
            snap["verify_calls"] += value
    return snap


def metrics_delta(before: Optional[dict], after: Optional[dict]) -> Optional[dict]:
    if before is None or after is None:
        return None
    hist = {k: after["accept"][k] - before["accept"].get(k, 0.0) for k in after["accept"]}
    hist = {k: int(v) for k, v in sorted(hist.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0) if v}
    gen, verify = after["gen_tokens"] - before["gen_tokens"], after["verify_calls"] - before["verify_calls"]
    return {"accept_length_hist": hist or None, "generation_tokens": gen, "verify_calls": verify,
            "mean_accept_length": round(gen / verify, 4) if verify > 0 else None}


# ---- statistics -----------------------------------------------------------------------------------------
def percentile(xs: Sequence[float], q: float) -> Optional[float]:
    """Linear interpolation between closest ranks (numpy's default); None for no data."""
    if not xs:
        return None
    s, k = sorted(xs), (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _ms(xs: Sequence[float]) -> dict:
    r = lambda v: None if v is None else round(v * 1e3, 3)  # noqa: E731
    return {"p50": r(percentile(xs, 50)), "p99": r(percentile(xs, 99)), "mean": r(statistics.fmean(xs) if xs else None)}


def summarize(runs: Sequence[Tuple[List[RequestResult], float]], metrics: Sequence[Optional[dict]]) -> dict:
    """One (endpoint, level) over its repetitions: ``runs`` = (results, wall_s) per repetition."""
    ok = [r for results, _ in runs for r in results if r.error is None]
    errs = [r.error for results, _ in runs for r in results if r.error is not None]
    tok_s = [sum(r.completion_tokens for r in res if r.error is None) / wall for res, wall in runs]
    req_s = [sum(r.error is None for r in res) / wall for res, wall in runs]
    spec = [(r.completion_tokens, r.meta["spec_verify_ct"]) for r in ok if r.meta.get("spec_verify_ct")]
    hist: Dict[str, int] = {}
    for r in ok:  # index k = rounds that accepted k drafts, i.e. accept length k + 1
        for k, count in enumerate(r.meta.get("spec_correct_drafts_histogram") or ()):
            if count:
                hist[str(k + 1)] = hist.get(str(k + 1), 0) + int(count)
    return {
        "requests": sum(len(res) for res, _ in runs), "completed": len(ok), "errors": len(errs),
        "first_error": errs[0] if errs else None, "output_tokens": sum(r.completion_tokens for r in ok),
        "output_tok_s": round(statistics.median(tok_s), 2), "output_tok_s_per_repeat": [round(x, 2) for x in tok_s],
        "request_per_s": round(statistics.median(req_s), 3), "request_per_s_per_repeat": [round(x, 3) for x in req_s],
        "wall_s_per_repeat": [round(w, 3) for _, w in runs],
        "ttft_ms": _ms([r.ttft_s for r in ok if r.ttft_s is not None]),
        "tpot_ms": _ms([r.tpot_s for r in ok if r.tpot_s is not None]),
        "latency_ms": _ms([r.latency_s for r in ok]),
        "mean_accept_length": round(sum(c for c, _ in spec) / sum(v for _, v in spec), 4) if spec else None,
        "accept_length_hist": dict(sorted(hist.items(), key=lambda kv: int(kv[0]))) or None,
        "metrics": _sum_metrics(metrics),
    }


def _sum_metrics(deltas: Sequence[Optional[dict]]) -> Optional[dict]:
    if not deltas or any(d is None for d in deltas):
        return None
    hist: Dict[str, int] = {}
    for d in deltas:
        for k, v in (d["accept_length_hist"] or {}).items():
            hist[k] = hist.get(k, 0) + v
    gen, verify = sum(d["generation_tokens"] for d in deltas), sum(d["verify_calls"] for d in deltas)
    return {"accept_length_hist": hist or None, "generation_tokens": gen, "verify_calls": verify,
            "mean_accept_length": round(gen / verify, 4) if verify > 0 else None}


def ratio(a, b) -> Optional[float]:
    return round(a / b, 4) if a is not None and b not in (None, 0) else None


def ratios_vs(results: dict, baseline: str) -> dict:
    """Per endpoint but the baseline and level: endpoint / baseline."""
    out = {}
    for name, by_c in results.items():
        if name == baseline:
            continue
        out[name] = {}
        for c, m in by_c.items():
            b = results[baseline][c]
            paired = [ratio(x, y) for x, y in zip(m["output_tok_s_per_repeat"], b["output_tok_s_per_repeat"])]
            paired = [p for p in paired if p is not None]
            out[name][c] = {"output_tok_s": round(statistics.median(paired), 4) if paired else None,
                            "output_tok_s_per_repeat": paired,
                            "request_per_s": ratio(m["request_per_s"], b["request_per_s"]),
                            **{f"{k}_{q}": ratio(m[f"{k}_ms"][q], b[f"{k}_ms"][q])
                               for k in ("ttft", "tpot") for q in ("p50", "p99")}}
    return out


# ---- the sweep --------------------------------------------------------------------------------------
def server_info(ep: Endpoint, timeout: float, api_key: Optional[str]) -> Optional[dict]:
    """Flags and version from /server_info (recorded beside the numbers); None where it does not answer."""
    try:
        status, body = http_get(ep, "/server_info", timeout, api_key)
        info = json.loads(body) if status == 200 else None
    except (OSError, http.client.HTTPException, ValueError):
        return None
    if not isinstance(info, dict):
        return None
    return {k: v for k, v in info.items() if k in SERVER_INFO_KEYS or k.startswith("speculative_")}


def sweep(endpoints: List[Endpoint], levels: List[int], prompts: List[dict], args, with_metrics=()) -> dict:
    """Every level, repetition and endpoint (rotated order); /metrics read around each run where listed."""
    def snap(ep):
        return metrics_snapshot(ep, args.timeout, args.api_key) if ep.name in with_metrics else None

    results: Dict[str, Dict[str, dict]] = {ep.name: {} for ep in endpoints}
    for li, c in enumerate(levels):
        n = args.requests_per_level or max(2 * c, 16)
        payloads = [make_payload(prompts[i % len(prompts)], args.max_new_tokens, args.temperature, args.ignore_eos)
                    for i in range(n)]
        runs = {ep.name: [] for ep in endpoints}
        deltas = {ep.name: [] for ep in endpoints}
        for r in range(args.repeats):
            k = (li + r) % len(endpoints)
            for ep in endpoints[k:] + endpoints[:k]:
                before = snap(ep)
                res, wall = run_requests(ep, payloads, c, args.timeout, args.api_key)
                deltas[ep.name].append(metrics_delta(before, snap(ep)))
                runs[ep.name].append((res, wall))
                one = summarize([(res, wall)], [])
                print(f"[{ep.name} c={c} rep {r + 1}/{args.repeats}] {one['output_tok_s']:.1f} tok/s, "
                      f"{one['request_per_s']:.2f} req/s, TTFT p50/p99 {one['ttft_ms']['p50']}/"
                      f"{one['ttft_ms']['p99']} ms, TPOT p50/p99 {one['tpot_ms']['p50']}/{one['tpot_ms']['p99']} ms, "
                      f"accept {one['mean_accept_length']}, errors {one['errors']}/{n}", flush=True)
        for ep in endpoints:
            results[ep.name][str(c)] = {"concurrency": c, **summarize(runs[ep.name], deltas[ep.name])}
    return results


def parse_levels(text: str) -> List[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--concurrency {text!r}: use comma-separated positive integers, e.g. 1,2,4,8") from None
    if not levels or min(levels) < 1:
        raise UsageError(f"--concurrency {text!r}: use comma-separated positive integers, e.g. 1,2,4,8")
    return levels


# ---- plots --------------------------------------------------------------------------------------------
def plot(report: dict, out_dir: str) -> List[str]:
    """throughput.png, latency.png and (with more than one endpoint) ratio.png under ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    res, base = report["results"], report["settings"]["baseline"]
    xs = lambda by_c: sorted(int(c) for c in by_c)  # noqa: E731
    levels = report["settings"]["concurrency"]
    paths = []

    def axes(a, title):
        a.set(xscale="log", xlabel="concurrency", title=title)
        a.set_xticks(levels, [str(c) for c in levels])
        a.minorticks_off()
        a.legend(fontsize=8)

    def save(fig, name):
        path = os.path.join(out_dir, name)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)

    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for name, by_c in res.items():
        c = xs(by_c)
        ax[0].plot(c, [by_c[str(x)]["output_tok_s"] for x in c], "o-", label=name)
        ax[1].plot(c, [by_c[str(x)]["request_per_s"] for x in c], "o-", label=name)
    for a, title in zip(ax, ("output tokens / s", "requests / s")):
        axes(a, title)
    save(fig, "throughput.png")
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for name, by_c in res.items():
        c = xs(by_c)
        for a, key in zip(ax, ("ttft_ms", "tpot_ms")):
            for q, style in (("p50", "o-"), ("p99", "x--")):
                a.plot(c, [by_c[str(x)][key][q] for x in c], style, label=f"{name} {q}")
    for a, title in zip(ax, ("TTFT (ms)", "TPOT (ms)")):
        axes(a, title)
    save(fig, "latency.png")
    if report.get("ratios"):
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, by_c in report["ratios"].items():
            c = xs(by_c)
            for key, style in (("output_tok_s", "o-"), ("tpot_p50", "x--")):
                ax.plot(c, [by_c[str(x)][key] for x in c], style, label=f"{name} {key}")
        ax.axhline(1.0, color="grey", lw=0.8)
        axes(ax, f"endpoint / {base}")
        save(fig, "ratio.png")
    return paths


# ---- CLI ----------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="bench_serving", description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint", action="append", default=[], metavar="NAME=URL", help="repeatable")
    ap.add_argument("--baseline", help="endpoint NAME the ratios divide by (default: the first)")
    ap.add_argument("--concurrency", default="1,2,4,8,16,32,64")
    ap.add_argument("--requests-per-level", type=int, default=None, help="default: max(2 * c, 16)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--prompts", help='JSONL, one {"prompt": str} or {"input_ids": [int]} a line')
    ap.add_argument("--warmup", type=int, default=2, help="untimed requests per endpoint before the sweep")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    ap.add_argument("--api-key")
    ap.add_argument("--out", help="the JSON report")
    ap.add_argument("--plot", metavar="JSON", help="only plot this report (no requests)")
    ap.add_argument("--plot-dir", help="write PNGs here (of --plot, or of this run)")
    return ap


def check_counts(args) -> None:
    for flag, v, lo in (("--repeats", args.repeats, 1), ("--max-new-tokens", args.max_new_tokens, 1),
                        ("--requests-per-level", args.requests_per_level, 1), ("--warmup", args.warmup, 0),
                        ("--temperature", args.temperature, 0)):
        if v is not None and v < lo:
            raise UsageError(f"{flag} {v}: must be >= {lo}")
    if args.timeout <= 0:
        raise UsageError(f"--timeout {args.timeout}: must be > 0")


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    try:
        if args.plot:
            if not args.plot_dir:
                raise UsageError("--plot needs --plot-dir")
            try:
                with open(args.plot) as f:
                    report = json.load(f)
            except (OSError, ValueError) as e:
                raise UsageError(f"--plot {args.plot}: {e}") from None
            for p in plot(report, args.plot_dir):
                print(p)
            return 0
        if not args.endpoint:
            raise UsageError("give at least one --endpoint NAME=URL")
        endpoints = [parse_endpoint(s) for s in args.endpoint]
        names = [ep.name for ep in endpoints]
        if len(set(names)) != len(names):
            raise UsageError(f"--endpoint names must be unique, got {names}")
        baseline = args.baseline or names[0]
        if baseline not in names:
            raise UsageError(f"--baseline {baseline!r} is not an endpoint name ({', '.join(names)})")
        levels = parse_levels(args.concurrency)
        check_counts(args)
        prompts = load_prompts(args.prompts)
        for ep in endpoints:
            check_health(ep, min(args.timeout, 60.0), args.api_key)
    except UsageError as e:
        print(f"bench_serving: error: {e}", file=sys.stderr)
        return 2
    servers = {ep.name: {"url": ep.url, "server_info": server_info(ep, 30.0, args.api_key),
                         "metrics": metrics_snapshot(ep, 30.0, args.api_key) is not None} for ep in endpoints}
    for ep in endpoints:
        warm = [make_payload(prompts[i % len(prompts)], args.max_new_tokens, args.temperature, args.ignore_eos)
                for i in range(args.warmup)]
        if warm:
            run_requests(ep, warm, 1, args.timeout, args.api_key)
    results = sweep(endpoints, levels, prompts, args, {n for n, s in servers.items() if s["metrics"]})
    report = {
        "command": " ".join([os.path.basename(sys.executable), sys.argv[0]] + argv),
        "environment": {"client_host": platform.node(), "python": platform.python_version(),
                        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        "settings": {"endpoints": servers, "baseline": baseline, "concurrency": levels,
                     "requests_per_level": {str(c): args.requests_per_level or max(2 * c, 16) for c in levels},
                     "repeats": args.repeats, "max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
                     "ignore_eos": args.ignore_eos, "prompts": args.prompts or "bench_e2e.PROMPTS",
                     "num_prompts": len(prompts), "warmup": args.warmup, "stream": True},
        "results": results,
        "ratios": ratios_vs(results, baseline),
    }
    for name, by_c in report["ratios"].items():
        line = ", ".join(f"c={c} {r['output_tok_s']}x" for c, r in by_c.items())
        print(f"{name} / {baseline} output tok/s: {line}", flush=True)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
        print(f"wrote {args.out}")
    if args.plot_dir:
        for p in plot(report, args.plot_dir):
            print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
