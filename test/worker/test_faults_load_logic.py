"""CPU: the load / fault plumbing of test_faults_gpu.py (``_faults_load.py``) against a fake SGLang server.

The fake speaks SGLang's native ``/generate`` (JSON and cumulative SSE chunks, ``rid``, ``stop``, the
over-long 400, ``/abort_request``, client disconnects) with a deterministic "greedy" output per prompt, and
can be made to misbehave one way at a time (a flipped greedy token, an ignored abort, a 500 instead of the
400, an untrimmed stop string, a request that never answers, a restart): each misbehaviour must be caught
by the rules the GPU test applies, and the honest fake must pass them. Says nothing about DDTREE itself.
"""

import dataclasses
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import _faults_load as L

CONTEXT = 256
PROMPTS = [[1000 + 7 * p + i for i in range(5 + p % 4)] for p in range(6)]


def _greedy(ids, n):
    return [(sum(ids) * 31 + 17 * k) % 97 + 3 for k in range(n)]


def _decode(ids):
    return "".join(_WORDS[t % len(_WORDS)] for t in ids)


_WORDS = ["a", "b", " c", "d:", "\n\n", "e", "return", "f "]


class Fake:
    """Server state and misbehaviour switches."""

    def __init__(self, **faults):
        self.faults = faults
        self.aborted, self.cut, self.lock = set(), set(), threading.Lock()


def _handler(fake):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def _json(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self._json(200, {})

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/abort_request":
                with fake.lock:
                    fake.aborted.add(req["rid"])
                return self._json(200, {})
            ids, sp, rid = req["input_ids"], req["sampling_params"], req["rid"]
            if len(ids) >= CONTEXT:
                if fake.faults.get("overlong_500"):
                    return self._json(500, {"error": {"message": "internal"}})
                return self._json(400, {"error": {"message": f"The input ({len(ids)} tokens) is longer than the "
                                                             f"model's context length ({CONTEXT} tokens)."}})
            if fake.faults.get("hang") and rid.endswith("-" + fake.faults["hang"]):
                time.sleep(fake.faults.get("hang_s", 30))
            n = sp["max_new_tokens"]
            out = _greedy(ids, n) if sp.get("temperature", 1) == 0 else [(rid.__hash__() + k) % 97 + 3 for k in range(n)]
            if (fake.faults.get("flip") is not None and ids == PROMPTS[fake.faults["flip"]] and sp["temperature"] == 0
                    and not rid.startswith("quiet")):  # under load only, as a batch-dependent kernel would
                out[5] += 1
            finish = {"type": "length", "length": n}
            for k in range(1, n + 1):
                hits = [s for s in sp.get("stop", []) if s in _decode(out[:k])]
                if hits:
                    out, finish = out[:k], {"type": "stop", "matched": hits[0]}
                    break
            text = _decode(out)
            if finish["type"] == "stop" and not fake.faults.get("untrimmed_stop"):
                text = text[: text.find(finish["matched"])]

            def answer(m, fin):
                return {"text": text if fin else _decode(out[:m]), "output_ids": out[:m],
                        "meta_info": {"finish_reason": fin, "completion_tokens": m}}

            if not req.get("stream"):
                return self._json(200, answer(len(out), finish))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            with fake.lock:  # cut_streams_once: each rid's first stream stops after one chunk, as a server
                cut = fake.faults.get("cut_streams_once") and rid not in fake.cut  # stopped by SIGTERM does
                fake.cut.add(rid)
            try:
                for m in range(4, len(out) + 4, 4):
                    m = min(m, len(out))
                    with fake.lock:
                        aborted = rid in fake.aborted and not fake.faults.get("ignore_abort")
                    fin = {"type": "abort", "message": "aborted"} if aborted else (finish if m == len(out) else None)
                    self.wfile.write(f"data: {json.dumps(answer(m, fin))}\n\n".encode())
                    self.wfile.flush()
                    if cut:
                        self.close_connection = True
                        return  # no finish reason, no [DONE]: the connection just closes
                    if fin is not None:
                        break
                    time.sleep(0.03 if n > 100 else 0.002)  # long (abort) requests: time for the abort to land
                self.wfile.write(b"data: [DONE]\n\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away (a disconnect request)
            self.close_connection = True

    return H


class _HTTPServer(ThreadingHTTPServer):
    request_queue_size = 256  # the default backlog (5) resets connections at concurrency 16
    allow_reuse_address = True  # the restart binds the same port again


class Server:
    def __init__(self, fake, port=0):
        self.httpd = _HTTPServer(("127.0.0.1", port), _handler(fake))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    servers = []

    def start(port=0, **faults):
        servers.append(Server(Fake(**faults), port))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


def _soak(base, seconds=1.5, concurrency=16, timeout_s=10.0, seed=0):
    quiet = L.quiet_run(lambda s: L.execute(base, s, timeout_s), PROMPTS)
    res = L.run_load(lambda s: L.execute(base, s, timeout_s), L.request_mix(PROMPTS, CONTEXT, seed), concurrency,
                     seconds, drain_s=20)
    return res, L.check_outcomes(res.outcomes, quiet, _decode)


# ---- the mix ----------------------------------------------------------------------------------------

def test_request_mix_is_seeded_covers_every_kind_and_fits_the_context():
    a = [s for _, s in zip(range(3000), L.request_mix(PROMPTS, CONTEXT, seed=7))]
    b = [s for _, s in zip(range(3000), L.request_mix(PROMPTS, CONTEXT, seed=7))]
    assert a == b and a != [s for _, s in zip(range(3000), L.request_mix(PROMPTS, CONTEXT, seed=8))]
    assert len({s.rid for s in a}) == len(a)
    total = sum(L.SOAK_WEIGHTS.values())
    for kind, w in L.SOAK_WEIGHTS.items():
        share = sum(s.kind == kind for s in a) / len(a)
        assert abs(share - w / total) < 0.04, (kind, share, w / total)
    for s in a:
        if s.kind == "overlong":
            assert len(s.input_ids) > CONTEXT and s.prompt == -1
            continue
        assert s.input_ids == tuple(PROMPTS[s.prompt])
        assert len(s.input_ids) + s.sampling_params["max_new_tokens"] < CONTEXT
        if s.kind in ("greedy", "stream", "stop"):
            assert s.sampling_params["temperature"] == 0 and s.sampling_params["max_new_tokens"] == L.GREEDY_MAX_NEW
        assert s.stream == (s.kind in ("stream", "abort", "disconnect"))
        assert (s.abort_after_chunks > 0) == (s.kind in ("abort", "disconnect"))


def test_request_mix_weights_select_kinds():
    mix = [s for _, s in zip(range(200), L.request_mix(PROMPTS, CONTEXT, 0, {"greedy": 1, "stream": 1}))]
    assert {s.kind for s in mix} == {"greedy", "stream"}
    with pytest.raises(AssertionError, match="unknown request kinds"):
        next(L.request_mix(PROMPTS, CONTEXT, 0, {"greed": 1}))


# ---- the rules against the fake ---------------------------------------------------------------------

def test_an_honest_server_passes_every_rule(serve):
    res, v = _soak(serve().base)
    assert not v.failures and not v.divergences and not res.hung, (v.failures, v.divergences, res.hung)
    assert set(v.counts) == set(L.KINDS), v.counts
    assert v.counts["abort"] == {"aborted": v.counts["abort"]["aborted"]}
    assert v.counts["overlong"] == {"http_error": v.counts["overlong"]["http_error"]}
    assert len(res.outcomes) > 50


def test_a_flipped_greedy_token_is_a_divergence_with_its_prompt(serve):
    res, v = _soak(serve(flip=2).base)
    assert not v.failures
    assert v.divergences and all(d[1] == PROMPTS[2] for d in v.divergences)
    labels = {d[0].split(" ")[0].split("-")[1] for d in v.divergences}
    assert labels <= {"greedy", "stream", "stop"} and {"greedy", "stream"} <= labels, labels
    for _, _, ref, got in v.divergences:
        assert ref[:5] == got[:5] and ref[5] != got[5]


@pytest.mark.parametrize("fault, kind, needle", [
    (dict(ignore_abort=True), "abort", "/abort_request after"),
    (dict(overlong_500=True), "overlong", "must get HTTP 400 naming the context length"),
    (dict(untrimmed_stop=True), "stop", "or not trimmed"),
])
def test_each_misbehaviour_is_a_failure(serve, fault, kind, needle):
    _, v = _soak(serve(**fault).base)
    bad = [f for f in v.failures if f"-{kind}:" in f]
    assert bad and all(needle in f for f in bad), v.failures[:5]
    assert len(bad) == len(v.failures), v.failures[:5]


def test_a_request_that_never_answers_times_out_and_fails(serve):
    base = serve(hang="sampling", hang_s=5).base
    quiet = L.quiet_run(lambda s: L.execute(base, s, 10), PROMPTS)
    res = L.run_load(lambda s: L.execute(base, s, 1.0), L.request_mix(PROMPTS, CONTEXT, 1), 8, 1.0, drain_s=20)
    v = L.check_outcomes(res.outcomes, quiet, _decode)
    assert not res.hung
    timeouts = [f for f in v.failures if "no complete answer (timeout" in f]
    assert timeouts and all("-sampling:" in f for f in timeouts), v.failures[:5]


def test_run_load_reports_requests_still_running_after_the_drain():
    release = threading.Event()

    def send(spec):
        if spec.rid == "r3-greedy" or spec.kind == "sampling":
            release.wait(30)
        return L.Outcome(spec, status="completed")

    t0 = time.monotonic()
    res = L.run_load(send, L.request_mix(PROMPTS, CONTEXT, 0, {"greedy": 3, "sampling": 1}), 4, 0.3, drain_s=0.5)
    release.set()
    assert time.monotonic() - t0 < 5
    assert res.hung and all(r.endswith("-sampling") or r == "r3-greedy" for r in res.hung), res.hung


def test_run_load_stops_at_max_requests_and_on_a_finite_mix():
    specs = [s for _, s in zip(range(10), L.request_mix(PROMPTS, CONTEXT, 0))]
    res = L.run_load(lambda s: L.Outcome(s, status="completed"), specs, 3, 30, drain_s=5)
    assert sorted(o.spec.rid for o in res.outcomes) == sorted(s.rid for s in specs) and res.seconds < 5
    res = L.run_load(lambda s: L.Outcome(s, status="completed"), L.request_mix(PROMPTS, CONTEXT, 0), 3, 30, 5,
                     max_requests=7)
    assert len(res.outcomes) == 7


def test_retrying_clients_ride_out_a_restart_on_the_same_port(serve):
    first = serve()
    port, base = first.port, first.base
    quiet = L.quiet_run(lambda s: L.execute(base, s, 10), PROMPTS)

    def restart():
        time.sleep(0.4)
        first.stop()
        time.sleep(0.8)  # down: connections are refused
        serve(port=port)

    threading.Thread(target=restart, daemon=True).start()
    mix = L.request_mix(PROMPTS, CONTEXT, 3, {"greedy": 2, "stream": 1})
    res = L.run_load(lambda s: L.execute_with_retries(base, s, 5, retry_for_s=20, backoff_s=0.1), mix, 8, 2.5, 30)
    v = L.check_outcomes(res.outcomes, quiet, _decode)
    assert not v.failures and not v.divergences and not res.hung, v.failures[:5]
    assert max(o.attempts for o in res.outcomes) > 1, "no request met the restart"
    gone = L.run_load(lambda s: L.execute_with_retries("http://127.0.0.1:9", s, 1, retry_for_s=0.5, backoff_s=0.1),
                      mix, 2, 0.2, 10)
    assert all(o.status == "transport" and o.attempts >= 2 for o in gone.outcomes), \
        [(o.status, o.attempts) for o in gone.outcomes]


def test_a_stream_cut_short_is_a_transport_failure_that_a_retrying_client_repeats(serve):
    base = serve(cut_streams_once=True).base
    quiet = L.quiet_run(lambda s: L.execute(base, s, 10), PROMPTS)
    spec = next(s for s in L.request_mix(PROMPTS, CONTEXT, 0, {"stream": 1}))
    once = L.execute(base, spec, 10)
    assert once.status == "transport" and "without a finish reason or [DONE]" in once.error, once
    v = L.check_outcomes([once], quiet, _decode)
    assert v.failures and "no complete answer (transport" in v.failures[0], v.failures
    again = L.execute_with_retries(base, dataclasses.replace(spec, rid="r-again"), 10, retry_for_s=10,
                                   backoff_s=0.05)
    assert again.status == "completed" and again.attempts == 2 and again.output_ids == quiet[spec.prompt], again


def test_host_snapshot_counts_sglang_processes(tmp_path):
    for pid, cmd in (("11", b"python3\x00-m\x00sglang.launch_server\x00--port\x00300"), ("12", b"bash\x00"),
                     ("13", b"python3\x00-m\x00pytest\x00test_sglang_thing.py"), ("14", None), ("x", b"sglang")):
        d = tmp_path / pid
        d.mkdir()
        if cmd is not None:
            (d / "cmdline").write_bytes(cmd)
    snap = L.host_snapshot(str(tmp_path))
    assert snap["sglang_processes"] == 1 and snap["processes"] == ["11 python3 -m sglang.launch_server --port 300"]
    assert snap["loadavg_1m"] >= 0


# ---- memory and metrics -------------------------------------------------------------------------------

def _series(f, n=120, dt=2.0):
    return [(i * dt, f(i)) for i in range(n)]


def test_flatness_passes_a_noisy_flat_series_and_catches_a_leak_and_a_spike():
    noise = [0, 12, -8, 30, -25, 5, 18, -3]
    flat = _series(lambda i: 60_000 + noise[i % 8] + (3000 if i < 10 else 0))  # allocations during the warm-up
    assert L.flatness(flat, warmup_s=30, growth_mib=256)["ok"]
    leak = _series(lambda i: 60_000 + 8 * i + noise[i % 8])  # 8 MiB per 2 s sample: ~700 MiB over the soak
    r = L.flatness(leak, warmup_s=30, growth_mib=256)
    assert not r["ok"] and "grew" in r["message"] and r["growth_mib"] > 256
    spike = _series(lambda i: 60_000 + (2000 if i == 70 else 0))
    r = L.flatness(spike, warmup_s=30, growth_mib=256)
    assert not r["ok"] and "peaked" in r["message"] and "grew" not in r["message"]
    r = L.flatness(flat[:20], warmup_s=30, growth_mib=256)
    assert not r["ok"] and "only 5 samples" in r["message"]


def test_memory_sampler_samples_until_stopped():
    values = iter(range(1000))
    with L.MemorySampler(lambda: next(values), every_s=0.01) as m:
        time.sleep(0.2)
    n = len(m.samples)
    time.sleep(0.05)
    assert n >= 5 and len(m.samples) == n
    assert [v for _, v in m.samples] == list(range(n))
    assert all(b[0] > a[0] for a, b in zip(m.samples, m.samples[1:]))


def test_metric_total_sums_label_sets_and_ignores_lookalikes():
    text = ("# HELP sglang:num_retracted_requests_total x\n# TYPE sglang:num_retracted_requests_total counter\n"
            'sglang:num_retracted_requests_total{model_name="m",tp_rank="0"} 3.0\n'
            'sglang:num_retracted_requests_total{model_name="m",tp_rank="1"} 2.0\n'
            'sglang:num_retracted_requests_total_created{model_name="m"} 1.7e9\n'
            "sglang:num_retracted_reqs 1.0\n")
    assert L.metric_total(text, "sglang:num_retracted_requests_total") == 5.0
    assert L.metric_total(text, "sglang:num_retracted_reqs") == 1.0
    assert L.metric_total(text, "sglang:nothing") == 0.0
