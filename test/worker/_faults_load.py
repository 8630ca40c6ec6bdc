"""Load and fault plumbing of ``test_faults_gpu.py`` (a DDTREE server under too little KV, a soak, a restart):
a seeded request mix, an HTTP client that runs it at a fixed concurrency with per-request deadlines (and,
for the restart, retries), the rules every outcome must meet, and a GPU-memory flatness check.

Vocabulary: a *spec* is one request to send; an *outcome* is what came back (or did not). A *quiet run* is
each greedy prompt sent alone, before any load: the reference greedy outputs. A greedy output that leaves
the quiet run's is a *divergence*, handed to the float32 near-tie rule by the GPU test (bf16 verify and
decode kernels round differently). Standard library only, so the same code runs against a fake server on
CPU (``test_faults_load_logic.py``).
"""

from __future__ import annotations

import http.client
import json
import random
import re
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

KINDS = ("greedy", "sampling", "stream", "abort", "disconnect", "stop", "overlong")
SOAK_WEIGHTS = {"greedy": 4, "sampling": 2, "stream": 2, "abort": 1, "disconnect": 1, "stop": 1, "overlong": 1}
GREEDY_MAX_NEW = 48  # every greedy / stream / stop request: the quiet run holds exactly these lengths
ABORT_MAX_NEW = 400  # long enough that the abort lands while it decodes
STOPS = ("\n\n", "return", ":")
CLEAR_CONTEXT_ERROR = re.compile(r"longer than the model's context length|context length")
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the server is local: no proxy


@dataclass(frozen=True)
class Spec:
    rid: str
    kind: str  # one of KINDS
    prompt: int  # index into the prompt pool; -1 for an over-long prompt
    input_ids: Tuple[int, ...]
    sampling_params: dict
    stream: bool = False
    abort_after_chunks: int = 0  # abort / disconnect: act after this many streamed chunks


@dataclass
class Outcome:
    spec: Spec
    status: str = "pending"  # completed | http_error | aborted | disconnected | broken_stream | timeout | transport
    http_status: Optional[int] = None
    error: str = ""
    output_ids: List[int] = field(default_factory=list)
    text: str = ""
    finish: Optional[dict] = None
    completion_tokens: Optional[int] = None
    chunks: int = 0
    attempts: int = 0
    t_start: float = 0.0
    t_end: float = 0.0


def request_mix(prompts: Sequence[Sequence[int]], context_len: int, seed: int, weights: Optional[dict] = None,
                prefix: str = "r") -> Iterator[Spec]:
    """An endless, seeded stream of specs drawn by ``weights`` (kind -> weight; SOAK_WEIGHTS by default).
    Greedy, stream and stop requests use GREEDY_MAX_NEW so the quiet run is their reference."""
    weights = dict(SOAK_WEIGHTS if weights is None else weights)
    unknown = set(weights) - set(KINDS)
    assert not unknown, f"unknown request kinds {unknown}"
    kinds = [k for k in KINDS if weights.get(k, 0) > 0]
    rng = random.Random(seed)
    i = 0
    while True:
        kind = rng.choices(kinds, [weights[k] for k in kinds])[0]
        p = rng.randrange(len(prompts))
        ids, stream, after = tuple(prompts[p]), False, 0
        params = dict(temperature=0.0, max_new_tokens=GREEDY_MAX_NEW, ignore_eos=True)
        if kind == "sampling":
            params.update(temperature=0.8, top_p=0.95, max_new_tokens=rng.randint(8, 64))
        elif kind == "stream":
            stream = True
        elif kind in ("abort", "disconnect"):
            params["max_new_tokens"] = min(ABORT_MAX_NEW, context_len - len(ids) - 2)
            stream, after = True, rng.randint(1, 4)
        elif kind == "stop":
            params["stop"] = list(rng.sample(STOPS, 2))
        elif kind == "overlong":
            p, ids = -1, tuple(rng.randrange(100, 1000) for _ in range(context_len + rng.randint(1, 64)))
            params["max_new_tokens"] = 8
        yield Spec(f"{prefix}{i}-{kind}", kind, p, ids, params, stream, after)
        i += 1


# ---- one request ------------------------------------------------------------------------------------

def _post(base: str, path: str, body: dict, timeout: float):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return _OPENER.open(req, timeout=timeout)


def execute(base: str, spec: Spec, timeout_s: float) -> Outcome:
    """Send ``spec`` once. ``timeout_s`` bounds the whole request (streamed ones included): a request that
    takes longer ends as ``timeout``."""
    out = Outcome(spec, attempts=1, t_start=time.monotonic())
    deadline = out.t_start + timeout_s
    body = {"input_ids": list(spec.input_ids), "sampling_params": spec.sampling_params, "rid": spec.rid,
            "stream": spec.stream}
    done = False  # a stream's closing "data: [DONE]"
    try:
        with _post(base, "/generate", body, timeout_s) as resp:
            if not spec.stream:
                _take(out, json.loads(resp.read().decode()))
            else:
                for raw in resp:
                    if time.monotonic() > deadline:
                        out.status, out.error = "timeout", f"stream still open after {timeout_s:g} s"
                        break
                    line = raw.decode().strip()
                    if not line.startswith("data:"):
                        continue
                    payload = line[len("data:"):].strip()
                    if payload == "[DONE]":
                        done = True
                        break
                    chunk = json.loads(payload)
                    out.chunks += 1
                    if not _stream_step(out, chunk):
                        break
                    if spec.kind == "disconnect" and out.chunks >= spec.abort_after_chunks:
                        out.status = "disconnected"
                        break  # leaving the with-block closes the connection: SGLang aborts the request
                    if spec.kind == "abort" and out.chunks == spec.abort_after_chunks:
                        _post(base, "/abort_request", {"rid": spec.rid}, 30).close()
        if out.status == "pending" and spec.stream and not done and out.finish is None:
            # the connection closed cleanly mid-answer (a server stopped by SIGTERM does this): no answer
            out.status, out.error = "transport", f"the stream ended after {out.chunks} chunks without a finish " \
                                                 "reason or [DONE]"
        if out.status == "pending":
            out.status = "aborted" if (out.finish or {}).get("type") == "abort" else "completed"
    except urllib.error.HTTPError as e:
        out.status, out.http_status, out.error = "http_error", e.code, e.read().decode(errors="replace")[:2000]
    except TimeoutError as e:
        out.status, out.error = "timeout", f"no answer within {timeout_s:g} s ({e})"
    except (OSError, ValueError, http.client.HTTPException) as e:  # refused / reset / cut mid-answer
        # (IncompleteRead is an HTTPException, not an OSError); a broken JSON answer
        out.status, out.error = "transport", f"{type(e).__name__}: {e}"
    out.t_end = time.monotonic()
    return out


def _take(out: Outcome, answer: dict) -> None:
    if "error" in answer and "meta_info" not in answer:
        out.status, out.error = "http_error", json.dumps(answer["error"])[:2000]
        return
    meta = answer.get("meta_info", {})
    out.output_ids, out.text = list(answer.get("output_ids") or []), answer.get("text", "")
    out.finish, out.completion_tokens = meta.get("finish_reason"), meta.get("completion_tokens")


def _stream_step(out: Outcome, chunk: dict) -> bool:
    """Fold one cumulative chunk into ``out``; False when the stream broke its own rules (recorded)."""
    text = chunk.get("text", "")
    if not text.startswith(out.text):
        out.status, out.error = "broken_stream", f"chunk {out.chunks} text does not extend the previous text"
        return False
    _take(out, chunk)
    return out.status == "pending"


def execute_with_retries(base: str, spec: Spec, timeout_s: float, retry_for_s: float, backoff_s: float = 1.0,
                         sleep: Callable[[float], None] = time.sleep) -> Outcome:
    """``execute`` again (from scratch) after a transport error (a stream cut short included), a timeout or an
    HTTP 5xx, until it completes or ``retry_for_s`` has passed since the first try: what a client does across a
    server restart."""
    t0, attempts = time.monotonic(), 0
    while True:
        out = execute(base, spec, timeout_s)
        attempts += 1
        retriable = out.status in ("transport", "timeout") or (out.status == "http_error"
                                                               and (out.http_status or 0) >= 500)
        if not retriable or time.monotonic() - t0 + backoff_s > retry_for_s:
            out.attempts, out.t_start = attempts, t0
            return out
        sleep(backoff_s)


# ---- many requests ----------------------------------------------------------------------------------

@dataclass
class LoadResult:
    outcomes: List[Outcome]
    hung: List[str]  # rids still running when the drain deadline passed
    seconds: float


def run_load(send: Callable[[Spec], Outcome], specs: Iterable[Spec], concurrency: int, duration_s: float,
             drain_s: float, max_requests: Optional[int] = None) -> LoadResult:
    """Keep ``concurrency`` requests in flight, taking new specs until ``duration_s`` has passed (or
    ``max_requests`` were started), then wait up to ``drain_s`` for the rest. A request still running after
    that is reported in ``hung`` (its thread is left behind: daemon-like, the test fails anyway)."""
    it, lock, started, outcomes, running = iter(specs), threading.Lock(), [0], [], {}
    t0 = time.monotonic()

    def worker():
        while True:
            with lock:
                if time.monotonic() - t0 >= duration_s or (max_requests is not None and started[0] >= max_requests):
                    return
                spec = next(it, None)
                if spec is None:
                    return
                started[0] += 1
                running[spec.rid] = True
            out = send(spec)
            with lock:
                outcomes.append(out)
                running.pop(spec.rid, None)

    pool = ThreadPoolExecutor(max_workers=concurrency)
    futures = [pool.submit(worker) for _ in range(concurrency)]
    wait(futures, timeout=max(0.0, duration_s - (time.monotonic() - t0)) + drain_s)
    with lock:
        hung = sorted(running)
    pool.shutdown(wait=False, cancel_futures=True)
    return LoadResult(list(outcomes), hung, time.monotonic() - t0)


def quiet_run(send: Callable[[Spec], Outcome], prompts: Sequence[Sequence[int]]) -> Dict[int, List[int]]:
    """Each prompt alone, greedy, GREEDY_MAX_NEW tokens: the reference outputs (prompt index -> ids)."""
    ref = {}
    for p, ids in enumerate(prompts):
        out = send(Spec(f"quiet{p}", "greedy", p, tuple(ids),
                        dict(temperature=0.0, max_new_tokens=GREEDY_MAX_NEW, ignore_eos=True)))
        assert out.status == "completed" and len(out.output_ids) == GREEDY_MAX_NEW, \
            f"quiet run: prompt {p} did not complete: {out.status} {out.error} {out.finish}"
        ref[p] = out.output_ids
    return ref


# ---- the rules --------------------------------------------------------------------------------------

@dataclass
class Verdict:
    failures: List[str]  # broken rules: any of these fails the test
    divergences: List[tuple]  # (label, prompt ids, reference ids, got ids): for the near-tie rule
    counts: Dict[str, Dict[str, int]]  # kind -> status -> n


def check_outcomes(outcomes: Sequence[Outcome], quiet: Dict[int, List[int]], decode: Callable[[List[int]], str],
                   expect_aborted: bool = True) -> Verdict:
    """Every request completed as its kind must, or failed clearly (over-long: HTTP 400 naming the context
    length); greedy outputs (greedy, stream, and the prefix a stop string left) equal the quiet run's or are
    listed as divergences. ``decode`` maps ids to text (the stop-string rule)."""
    failures, divergences, counts = [], [], {}
    for o in outcomes:
        s, tag = o.spec, f"{o.spec.rid}"
        counts.setdefault(s.kind, {}).setdefault(o.status, 0)
        counts[s.kind][o.status] += 1
        fin = (o.finish or {}).get("type")
        if o.status in ("timeout", "transport"):
            failures.append(f"{tag}: no complete answer ({o.status}: {o.error})")
            continue
        if s.kind == "overlong":
            if not (o.status == "http_error" and o.http_status == 400 and CLEAR_CONTEXT_ERROR.search(o.error)):
                failures.append(f"{tag}: an over-long prompt ({len(s.input_ids)} tokens) must get HTTP 400 naming "
                                f"the context length; got {o.status} {o.http_status} {o.error[:300]!r}")
            continue
        if s.kind == "disconnect":
            if o.status not in ("disconnected", "completed"):
                failures.append(f"{tag}: {o.status} {o.http_status} {o.error[:300]}")
            continue
        if s.kind == "abort":  # /abort_request after a few chunks of a long request: it must end as aborted
            n = s.sampling_params["max_new_tokens"]
            ran_out = o.status == "completed" and fin == "length" and len(o.output_ids) == n
            if o.status != "aborted" and not (ran_out and not expect_aborted):
                failures.append(f"{tag}: /abort_request after {s.abort_after_chunks} chunks, got {o.status} "
                                f"{o.finish} after {len(o.output_ids)} of {n} tokens {o.error[:300]}")
            continue
        if o.status != "completed":
            failures.append(f"{tag}: {o.status} {o.http_status} {o.error[:300]}")
            continue
        n = s.sampling_params["max_new_tokens"]
        if o.completion_tokens != len(o.output_ids):
            failures.append(f"{tag}: completion_tokens {o.completion_tokens} != {len(o.output_ids)} output ids")
        if s.kind == "stop":
            if fin == "stop":
                matched = (o.finish or {}).get("matched")
                if matched not in s.sampling_params["stop"] or matched in o.text:
                    failures.append(f"{tag}: stop {o.finish} with text {o.text[-80:]!r}: not one of "
                                    f"{s.sampling_params['stop']} or not trimmed")
                elif matched not in decode(o.output_ids):
                    failures.append(f"{tag}: finished on {matched!r}, which its output ids do not contain")
            elif fin != "length" or len(o.output_ids) != n:
                failures.append(f"{tag}: finish {o.finish} after {len(o.output_ids)} of {n} tokens")
            ref = quiet[s.prompt][: len(o.output_ids)]
        else:
            if fin != "length" or len(o.output_ids) != n:
                failures.append(f"{tag}: finish {o.finish} after {len(o.output_ids)} of {n} tokens")
            if s.kind == "sampling":
                continue
            ref = quiet[s.prompt]
        if o.output_ids != ref:
            divergences.append((f"{tag} vs the quiet run", list(s.input_ids), list(ref), list(o.output_ids)))
    return Verdict(failures, divergences, counts)


# ---- the host ----------------------------------------------------------------------------------------

def host_snapshot(proc_root: str = "/proc") -> dict:
    """The machine beside a load run: 1-minute load average and the processes whose command line names sglang
    (a server left over from an earlier test would slow the next one: session 19's second soak served 74
    requests/s against the first's 126, cause unknown)."""
    import os

    procs = []
    for pid in (d for d in os.listdir(proc_root) if d.isdigit()):
        try:
            with open(os.path.join(proc_root, pid, "cmdline"), "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if "sglang" in cmd and "pytest" not in cmd:
            procs.append(f"{pid} {cmd[:160]}")
    return {"loadavg_1m": round(os.getloadavg()[0], 2), "sglang_processes": len(procs), "processes": procs[:20]}


# ---- GPU memory -------------------------------------------------------------------------------------

def nvidia_smi_used_mib(index: int = 0) -> float:
    """Memory in use on GPU ``index`` (MiB, all processes), from nvidia-smi."""
    out = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30, check=True)
    return float(out.stdout.strip().splitlines()[0])


class MemorySampler:
    """Calls ``read_mib`` every ``every_s`` seconds in a thread; ``samples`` is [(seconds since start, MiB)]."""

    def __init__(self, read_mib: Callable[[], float], every_s: float = 2.0):
        self.read_mib, self.every_s, self.samples = read_mib, every_s, []
        self._stop, self._thread = threading.Event(), threading.Thread(target=self._run, daemon=True)

    def _run(self):
        t0 = time.monotonic()
        while not self._stop.is_set():
            self.samples.append((time.monotonic() - t0, float(self.read_mib())))
            self._stop.wait(self.every_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=60)


def flatness(samples: Sequence[Tuple[float, float]], warmup_s: float, growth_mib: float,
             peak_mib: Optional[float] = None) -> dict:
    """Is memory flat after ``warmup_s``? ok when the median of the last quarter of the samples exceeds the
    median of the first quarter by at most ``growth_mib`` (a leak grows it) and no sample exceeds that first
    median by more than ``peak_mib`` (default 4 x growth_mib). Needs at least 8 samples after the warm-up."""
    peak_mib = 4 * growth_mib if peak_mib is None else peak_mib
    used = [m for t, m in samples if t >= warmup_s]
    if len(used) < 8:
        return {"ok": False, "message": f"only {len(used)} samples after the {warmup_s:g} s warm-up (need 8)",
                "samples": len(used)}
    q = len(used) // 4
    first, last = statistics.median(used[:q]), statistics.median(used[-q:])
    res = {"samples": len(used), "first_mib": first, "last_mib": last, "growth_mib": last - first,
           "peak_over_first_mib": max(used) - first, "min_mib": min(used), "max_mib": max(used)}
    problems = []
    if last - first > growth_mib:
        problems.append(f"grew {last - first:.0f} MiB (> {growth_mib:g}) from {first:.0f} to {last:.0f} MiB")
    if max(used) - first > peak_mib:
        problems.append(f"peaked {max(used) - first:.0f} MiB (> {peak_mib:g}) above {first:.0f} MiB")
    res["ok"], res["message"] = not problems, "; ".join(problems) or "flat"
    return res


def metric_total(metrics_text: str, name: str) -> float:
    """Sum of a Prometheus metric's samples (all label sets) in a /metrics answer; 0 when absent."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            if head.split("{")[0] == name:
                total += float(value)
    return total
