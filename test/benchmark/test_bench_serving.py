"""benchmark/bench_serving.py against fake SGLang servers (stdlib http.server in threads, loopback only).

``FakeSGLang`` answers like SGLang 0.5.16's HTTP server (sglang/srt/entrypoints/http_server.py): GET /health,
POST /generate (``stream: true``: chunked ``data: {json}`` events, the whole output so far in each, or only
the new tokens when ``incremental``, then ``data: [DONE]``; else one JSON object), GET /metrics (Prometheus
text with upstream's counters and ours) and /server_info. Tokens come in rounds: the first after ``ttft_s``,
then ``per_round`` tokens every ``round_s`` (a speculative server's accept length), so TTFT and TPOT are
known: TPOT = round_s / per_round. Output ids are a function of the prompt, so two fakes agree unless told
not to (``mutate``). ``shadow_compare``'s tests reuse it; for its ``--reference`` a fake answers non-streamed
``return_logprob`` requests as SGLang's tokenizer manager shapes them (``[logprob, token_id, null]`` entries):
a text prompt's ``input_token_logprobs`` (one token per character, its code point) with ``logprob_start_len`` 0,
and ``output_token_logprobs`` / ``output_token_ids_logprobs`` from ``logprobs(input_ids, token_ids)`` ->
(greedy id, its log-prob, {token: log-prob}); ``refuse_logprob`` answers HTTP 400 as DFLASH / DDTREE do.
"""

import collections
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmark"))
import bench_serving as bs  # noqa: E402

SCRIPT = os.path.join(ROOT, "benchmark", "bench_serving.py")


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 drops SYNs beyond 5 connects at once (a 1 s retry in TTFT)


class FakeSGLang:
    def __init__(self, *, ttft_s=0.01, round_s=0.004, per_round=1, ttft_of=None, mutate=None, incremental=False,
                 metrics=True, output_ids=True, fail_every=0, stop_after=None, logprobs=None, refuse_logprob=False):
        self.ttft_s, self.round_s, self.per_round, self.ttft_of = ttft_s, round_s, per_round, ttft_of or {}
        self.mutate = mutate or {}  # prompt key -> (position, token)
        self.incremental, self.metrics, self.return_ids = incremental, metrics, output_ids
        self.fail_every, self.stop_after = fail_every, stop_after or {}  # prompt key -> output length
        self.cut_stream = False  # end the stream without data: [DONE]
        self.logprobs, self.refuse_logprob = logprobs, refuse_logprob
        self.logprob_requests = []  # the bodies of return_logprob requests
        self.counts = collections.Counter()  # (method, path) -> requests
        self.lock = threading.Lock()
        self.gen_tokens = self.verify_calls = self.n_generate = 0
        self.accept = collections.Counter()  # accept length -> rounds
        self.server = _Server(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    @staticmethod
    def key(req):
        return req["text"] if "text" in req else tuple(req["input_ids"])

    def tokens(self, req, n):
        k = self.key(req)
        seed = sum(map(ord, k)) if isinstance(k, str) else sum(k)
        ids = [(seed * 31 + 7 * i) % 1000 + 1 for i in range(self.stop_after.get(k, n))]
        if k in self.mutate and self.mutate[k][0] < len(ids):
            ids[self.mutate[k][0]] = self.mutate[k][1]
        return ids

    def rounds(self, n):
        """Token counts per chunk: 1 (prefill), then per_round at a time."""
        out, left = [1], n - 1
        while left > 0:
            out.append(min(self.per_round, left))
            left -= out[-1]
        return out if n > 0 else []

    def metrics_text(self):
        lines = ["# HELP sglang:generation_tokens_total Number of generation tokens processed.",
                 "# TYPE sglang:generation_tokens_total counter",
                 f'sglang:generation_tokens_total{{model_name="fake"}} {float(self.gen_tokens)}',
                 f'sglang:spec_verify_calls_total{{model_name="fake"}} {float(self.verify_calls)}',
                 'sglang:spec_accept_length{model_name="fake"} 1.5']
        lines += [f'sglang:ddtree_accept_length_total{{accept_length="{a}",model_name="fake"}} {float(c)}'
                  for a, c in sorted(self.accept.items())]
        return "\n".join(lines) + "\n"

    def _handler(fake):
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, status, body=b"", ctype="application/json"):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                with fake.lock:
                    fake.counts["GET", self.path] += 1
                if self.path == "/health":
                    self._send(200)
                elif self.path == "/metrics" and fake.metrics:
                    with fake.lock:
                        text = fake.metrics_text()
                    self._send(200, text.encode(), "text/plain; version=0.0.4")
                elif self.path == "/server_info":
                    self._send(200, json.dumps({"version": "0.5.16", "speculative_algorithm": "FAKE",
                                                "internal_states": [{}]}).encode())
                else:
                    self._send(404, b'{"detail":"Not Found"}')

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.counts["POST", self.path] += 1
                    fake.n_generate += self.path == "/generate"
                    nth = fake.n_generate
                if self.path != "/generate":
                    return self._send(404, b'{"detail":"Not Found"}')
                if fake.fail_every and nth % fake.fail_every == 0:
                    return self._send(500, b'{"error": "fake failure"}')
                if body.get("return_logprob"):
                    return self._logprob(body)
                ids = fake.tokens(body, body["sampling_params"]["max_new_tokens"])
                rounds = fake.rounds(len(ids))
                meta = {"id": f"r{nth}", "prompt_tokens": 5, "weight_version": "default"}
                if fake.per_round > 1:
                    meta["spec_verify_ct"] = len(rounds) - 1
                    meta["spec_accept_length"] = len(ids) / max(1, len(rounds) - 1)
                    hist = [0] * fake.per_round
                    for k in rounds[1:]:
                        hist[k - 1] += 1
                    meta["spec_correct_drafts_histogram"] = hist
                delay = fake.ttft_of.get(fake.key(body), fake.ttft_s)
                if not body.get("stream"):
                    time.sleep(delay + fake.round_s * (len(rounds) - 1))
                    fake._account(rounds)
                    out = {"text": "".join(f" t{i}" for i in ids), "meta_info": dict(
                        meta, completion_tokens=len(ids), finish_reason={"type": "length", "length": len(ids)})}
                    if fake.return_ids:
                        out["output_ids"] = ids
                    return self._send(200, json.dumps(out).encode())
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                done = 0
                for j, k in enumerate(rounds):
                    time.sleep(delay if j == 0 else fake.round_s)
                    new, done = ids[done : done + k], done + k
                    part = new if fake.incremental else ids[:done]
                    last = done == len(ids)
                    chunk = {"text": "".join(f" t{i}" for i in part), "meta_info": dict(
                        meta, completion_tokens=done,
                        finish_reason={"type": "length", "length": done} if last else None)}
                    if fake.return_ids:
                        chunk["output_ids"] = part
                    self._chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                fake._account(rounds)
                if not fake.cut_stream:
                    self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

            def _logprob(self, body):
                with fake.lock:
                    fake.logprob_requests.append(body)
                if fake.refuse_logprob:
                    return self._send(400, b'{"error": {"message": "speculative decoding does not support '
                                           b'return_logprob yet."}}')
                meta = {"id": "lp", "completion_tokens": 1, "finish_reason": {"type": "length", "length": 1}}
                if "text" in body:  # the fake's tokenization: one token per character
                    ids = [ord(ch) for ch in body["text"]]
                    if body.get("logprob_start_len") == 0:
                        meta["input_token_logprobs"] = [[None if i == 0 else -1.0, t, None] for i, t in enumerate(ids)]
                else:
                    ids = list(body["input_ids"])
                asked = body.get("token_ids_logprob")
                top, top_lp, lps = fake.logprobs(tuple(ids), asked) if asked else (1, -0.1, {})
                meta["output_token_logprobs"] = [[top_lp, top, None]]
                if asked:
                    meta["output_token_ids_logprobs"] = [[[lps[t], t, None] for t in asked]]
                self._send(200, json.dumps({"text": f" t{top}", "output_ids": [top], "meta_info": meta}).encode())

            def _chunk(self, data):
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

        return Handler

    def _account(self, rounds):
        with self.lock:
            self.gen_tokens += sum(rounds)
            if self.per_round > 1:
                self.verify_calls += len(rounds) - 1
                self.accept.update(rounds[1:])


@pytest.fixture
def fakes():
    made = []

    def make(**kw):
        made.append(FakeSGLang(**kw))
        return made[-1]

    yield make
    for f in made:
        f.close()


def free_port_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


# ---- pieces -----------------------------------------------------------------------------------------
def test_percentile_matches_linear_interpolation():
    xs = list(range(1, 11))
    assert bs.percentile(xs, 50) == 5.5
    assert abs(bs.percentile(xs, 99) - 9.91) < 1e-9
    assert bs.percentile([3.0], 99) == 3.0 and bs.percentile([], 50) is None
    assert bs.percentile([5, 1, 3], 0) == 1 and bs.percentile([5, 1, 3], 100) == 5


def test_merge_chunk_cumulative_and_incremental():
    cum, inc = bs.RequestResult(), bs.RequestResult()
    for done, new in ((1, [7]), (3, [8, 9]), (4, [10])):
        all_ids = [7, 8, 9, 10][:done]
        bs.merge_chunk(cum, {"output_ids": all_ids, "text": "x" * done, "meta_info": {"completion_tokens": done}})
        bs.merge_chunk(inc, {"output_ids": new, "text": "x" * len(new), "meta_info": {"completion_tokens": done}})
    assert cum.output_ids == inc.output_ids == [7, 8, 9, 10]
    assert cum.text == inc.text == "xxxx" and cum.completion_tokens == 4


def test_parse_prometheus_and_delta():
    text = ('# HELP x y\n# TYPE sglang:ddtree_accept_length_total counter\n'
            'sglang:ddtree_accept_length_total{accept_length="2",model_name="a \\"q\\" b"} 3.0\n'
            'sglang:ddtree_accept_length_total{accept_length="10",model_name="m"} 1.0 1700000000\n'
            'sglang:generation_tokens_total{model_name="m"} 12\nsglang:spec_verify_calls_total 4\nbad line\n'
            'sglang:spec_accept_length{model_name="m"} NaN\n')
    samples = bs.parse_prometheus(text)
    assert samples[0] == ("sglang:ddtree_accept_length_total", {"accept_length": "2", "model_name": 'a "q" b'}, 3.0)
    assert len(samples) == 5 and samples[1][2] == 1.0
    before = {"accept": {"2": 1.0}, "gen_tokens": 2.0, "verify_calls": 1.0}
    after = {"accept": {"2": 3.0, "10": 1.0}, "gen_tokens": 12.0, "verify_calls": 4.0}
    d = bs.metrics_delta(before, after)
    assert d["accept_length_hist"] == {"2": 2, "10": 1} and d["mean_accept_length"] == round(10 / 3, 4)


def test_generate_not_streamed(fakes):
    f = fakes(per_round=2)
    ep = bs.parse_url(f.url, "x")
    r = bs.generate(ep, bs.make_payload({"text": "a"}, 5, 0.0, True, stream=False), 10)
    assert r.error is None and r.ttft_s is None and r.output_ids == f.tokens({"text": "a"}, 5)
    assert r.meta["spec_verify_ct"] == 2 and r.tpot_s is None


# ---- end to end -----------------------------------------------------------------------------------
@pytest.fixture
def sweep_report(fakes, tmp_path, capsys):
    # 15 ms rounds: on a loaded CI machine sleeps overshoot by a few ms, which at 4 ms rounds bent the ratios below
    base = fakes(round_s=0.015, per_round=1)
    spec = fakes(round_s=0.015, per_round=2, incremental=True)
    out = tmp_path / "serving.json"
    rc = bs.main(["--endpoint", f"base={base.url}", "--endpoint", f"spec={spec.url}", "--concurrency", "1,2,4",
                  "--requests-per-level", "6", "--repeats", "2", "--max-new-tokens", "9", "--warmup", "1",
                  "--out", str(out)])
    stdout = capsys.readouterr().out
    assert rc == 0, stdout
    return json.loads(out.read_text()), stdout, base, spec, tmp_path


def test_sweep_end_to_end(sweep_report):
    rep, stdout, base, spec, _ = sweep_report
    assert "--endpoint spec=" in rep["command"]
    s = rep["settings"]
    assert s["baseline"] == "base" and s["concurrency"] == [1, 2, 4] and s["repeats"] == 2
    assert s["endpoints"]["spec"]["server_info"] == {"version": "0.5.16", "speculative_algorithm": "FAKE"}
    assert s["endpoints"]["base"]["metrics"] is True
    for name in ("base", "spec"):
        for c in ("1", "2", "4"):
            m = rep["results"][name][c]
            assert m["errors"] == 0 and m["completed"] == 12 and m["output_tokens"] == 12 * 9
            assert len(m["output_tok_s_per_repeat"]) == 2 and m["ttft_ms"]["p50"] > 5
    # spec: 9 tokens = 1 (prefill) + 4 rounds of 2 -> accept length 9 / 4; every round accepted 2
    m = rep["results"]["spec"]["4"]
    assert m["mean_accept_length"] == 2.25 and m["accept_length_hist"] == {"2": 48}
    assert m["metrics"]["accept_length_hist"] == {"2": 48} and m["metrics"]["mean_accept_length"] == 2.25
    assert rep["results"]["base"]["1"]["mean_accept_length"] is None
    assert rep["results"]["base"]["1"]["metrics"]["accept_length_hist"] is None
    # TPOT: base 15 ms per token, spec 7.5 ms (2 tokens per 15 ms round): half, and about twice the throughput
    r = rep["ratios"]["spec"]["1"]
    assert 0.4 < r["tpot_p50"] < 0.7 and r["output_tok_s"] > 1.3 and len(r["output_tok_s_per_repeat"]) == 2
    assert set(rep["ratios"]) == {"spec"}
    # progress: one line per endpoint, level and repetition, order rotated by level + repetition
    lines = [ln for ln in stdout.splitlines() if ln.startswith("[")]
    assert len(lines) == 2 * 3 * 2
    firsts = [ln.split()[0][1:] for ln in lines[::2]]
    assert firsts == ["base", "spec", "spec", "base", "base", "spec"]
    # requests: health + warm-up + 3 levels x 2 repeats x 6, /metrics around every run
    assert base.counts["POST", "/generate"] == 1 + 3 * 2 * 6 and base.counts["GET", "/health"] == 1
    assert base.counts["GET", "/metrics"] == 1 + 2 * 3 * 2


def test_plot_mode(sweep_report, capsys):
    _, _, _, _, tmp = sweep_report
    rc = bs.main(["--plot", str(tmp / "serving.json"), "--plot-dir", str(tmp / "png")])
    assert rc == 0
    for name in ("throughput.png", "latency.png", "ratio.png"):
        p = tmp / "png" / name
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_latency_percentiles_on_known_delays(fakes, tmp_path, capsys):
    """TTFT of prompt i is 10 * (i + 1) ms; rounds of one token every 6 ms: percentiles within tolerance."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"input_ids": [i + 1, 2, 3]}) + "\n" for i in range(10)))
    f = fakes(round_s=0.006, ttft_of={(i + 1, 2, 3): 0.01 * (i + 1) for i in range(10)}, metrics=False)
    out = tmp_path / "r.json"
    rc = bs.main(["--endpoint", f"one={f.url}", "--concurrency", "1,3", "--requests-per-level", "10",
                  "--prompts", str(prompts), "--max-new-tokens", "6", "--warmup", "0", "--out", str(out)])
    assert rc == 0
    rep = json.loads(out.read_text())
    for c in ("1", "3"):
        m = rep["results"]["one"][c]
        # a loaded host only ever adds latency: tight below, loose above (CI, 2 busy cores: p99 114 ms once)
        assert 55 - 1 <= m["ttft_ms"]["p50"] <= 55 + 20, m["ttft_ms"]
        assert 99.1 - 1 <= m["ttft_ms"]["p99"] <= 99.1 + 40, m["ttft_ms"]
        assert m["ttft_ms"]["p50"] < m["ttft_ms"]["p99"] - 20, m["ttft_ms"]  # the spread of 10..100 ms is seen
        assert 6 - 0.3 <= m["tpot_ms"]["p50"] <= 6 + 3 and 6 - 0.3 <= m["tpot_ms"]["p99"] <= 6 + 5, m["tpot_ms"]
        assert m["metrics"] is None and m["output_tokens"] == 60
    # closed loop at c=3: 10 requests of ~55 + 30 ms mean in about ceil(10/3) waves, well under serial time
    assert rep["results"]["one"]["3"]["request_per_s"] > 1.8 * rep["results"]["one"]["1"]["request_per_s"]
    assert rep["ratios"] == {} and f.counts["GET", "/metrics"] == 1  # the probe only


def test_default_requests_per_level_and_errors_counted(fakes, capsys, tmp_path):
    f = fakes(ttft_s=0.001, round_s=0.001, fail_every=4)
    out = tmp_path / "e.json"
    assert bs.main(["--endpoint", f"x={f.url}", "--concurrency", "2", "--max-new-tokens", "3",
                    "--warmup", "0", "--out", str(out)]) == 0
    m = json.loads(out.read_text())["results"]["x"]["2"]
    assert m["requests"] == 16 and m["errors"] == 4 and m["completed"] == 12
    assert m["first_error"].startswith("HTTP 500")


def test_unreachable_endpoint_is_one_line_with_url(fakes, capsys):
    good, dead = fakes(), free_port_url()
    rc = bs.main(["--endpoint", f"a={good.url}", "--endpoint", f"b={dead}", "--concurrency", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and f"{dead}/health unreachable" in err
    assert good.counts["POST", "/generate"] == 0  # checked before any request


@pytest.mark.parametrize("argv, message", [
    (["--endpoint", "http://x:1"], "use NAME=URL"),
    (["--endpoint", "a=ftp://x"], "URL must look like http://HOST[:PORT]"),
    (["--endpoint", "a=http://x:1", "--endpoint", "a=http://y:1"], "names must be unique"),
    (["--endpoint", "a=http://x:1", "--baseline", "b"], "--baseline 'b' is not an endpoint name"),
    (["--endpoint", "a=http://x:1", "--concurrency", "1,x"], "--concurrency '1,x'"),
    (["--endpoint", "a=http://x:1", "--concurrency", "0"], "--concurrency '0'"),
    (["--endpoint", "a=http://x:1", "--repeats", "0"], "--repeats 0: must be >= 1"),
    (["--endpoint", "a=http://x:1", "--prompts", "/nonexistent.jsonl"], "--prompts /nonexistent.jsonl"),
    ([], "give at least one --endpoint"),
    (["--plot", "x.json"], "--plot needs --plot-dir"),
])
def test_bad_arguments_one_line(argv, message, capsys):
    assert bs.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_bad_prompt_line(tmp_path, capsys):
    p = tmp_path / "p.jsonl"
    p.write_text('{"prompt": "ok"}\n{"text": "no"}\n')
    assert bs.main(["--endpoint", "a=http://127.0.0.1:1", "--prompts", str(p)]) == 2
    assert f"{p}:2: need" in capsys.readouterr().err


def test_runs_as_a_script():
    proc = subprocess.run([sys.executable, SCRIPT, "--endpoint", f"a={free_port_url()}", "--concurrency", "1,"
                           "2"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unreachable" in proc.stderr and proc.stderr.count("\n") == 1
    proc = subprocess.run([sys.executable, SCRIPT, "--max-new-tokens", "x"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--max-new-tokens" in proc.stderr


def test_stream_cut_short_is_an_error(fakes):
    f = fakes()
    f.cut_stream = True
    r = bs.generate(bs.parse_url(f.url), bs.make_payload({"text": "a"}, 4, 0.0, True), 10)
    assert r.error == "the stream ended before data: [DONE]" and len(r.output_ids) == 4
