"""GPU: a DDTREE server under faults and load (packaged tiny trained pair, bf16, ``launch_server`` + HTTP).

Each test starts its own ``sglang.launch_server`` (DDTREE budget 64, top-k 8, context 1024; backend
``DDTREE_TEST_BACKEND``, default triton), awaited with ``python -m sglang_ddtree wait-healthy``, and first sends
every prompt alone (the *quiet run*: the reference greedy outputs). Greedy outputs under load must equal the
quiet run's, or leave it only at a float32 near-tie (|top-2 margin| < EPSILON, the rule of
test_trained_pair_gpu / test_features_gpu), because bf16 kernels round differently at other batch sizes.
  - test_kv_pool_too_small_retracts_and_resumes: a KV pool of DDTREE_FAULTS_KV_TOKENS (default 4096) tokens and
    SGLANG_INIT_NEW_TOKEN_RATIO=0.05 (upstream's admission estimate, so the scheduler admits more than fits),
    48 greedy requests of 240 new tokens at once: the scheduler must log "KV cache pool is full. Retract
    requests." and every request must still finish with all its tokens, equal to the quiet run.
  - test_soak_mixed_requests_at_concurrency_64: DDTREE_SOAK_S (default 240) seconds of the seeded mix of
    ``_faults_load.request_mix`` (greedy, sampling, streaming, /abort_request, client disconnects, stop strings,
    over-long prompts) at DDTREE_SOAK_CONCURRENCY (64): every request completes as its kind must or gets a
    clear error (over-long: HTTP 400 naming the context length), none outlives its 120 s deadline or the drain,
    greedy outputs == quiet run up to near-ties, GPU memory (nvidia-smi) flat after DDTREE_SOAK_WARMUP_S (60):
    growth <= DDTREE_SOAK_GROWTH_MIB (256); the server serves the quiet prompts unchanged afterwards.
  - test_restart_under_load_with_retrying_clients: 16 clients send greedy and streamed requests, retrying from
    scratch on refused / reset connections and 5xx for up to 240 s; 15 s in, the server gets SIGTERM, and a
    new one starts on the same port. Every request completes, some needed a retry, some completed on the new
    server, and all greedy outputs equal the quiet run (of the first server) up to near-ties.
Run: ``python -m pytest -m gpu test/worker/test_faults_gpu.py -v`` (or one test by -k); the device calls are
in scripts/device/rollout.sh (``faults``, ``soak``). Each server's log is kept beside its records (pytest's tmp
dir) and quoted on failure; a JSON record of each test goes to $SGLANG_DDTREE_KEEP_REPORTS when set.
The plumbing is tested on CPU against a fake server: test_faults_load_logic.py. CI never runs this file.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import _faults_load as L
import _features_helpers as H
from _http_helpers import free_port, http
from test_trained_pair_gpu import EPSILON, _load

pytestmark = pytest.mark.gpu

CONTEXT = 1024
SERVER = dict(dtype="bfloat16", context_length=CONTEXT, sampling_backend="pytorch", cuda_graph_max_bs_decode=16,
              attention_backend=H.test_backend(), speculative_algorithm="DDTREE", speculative_ddtree_budget=64,
              speculative_ddtree_topk=8, log_level="warning", enable_metrics=True)
REQUEST_TIMEOUT_S = 120
N_PROMPTS = 16


def _env_num(name, default):
    return type(default)(os.environ.get(name, default))


# ---- fixtures and the server ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pair():
    from sglang_ddtree.fixtures import tiny_pair_path

    return tiny_pair_path()


@pytest.fixture(scope="module")
def tok(pair):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(pair.target)


@pytest.fixture(scope="module")
def prompts(tok):
    return [tok(p)["input_ids"] for p in _load("bench_e2e").PROMPTS[:N_PROMPTS]]


@pytest.fixture(scope="module")
def target(pair):
    import torch

    from sglang_ddtree.reference.qwen3 import Qwen3ForCausalLM

    return Qwen3ForCausalLM.from_pretrained(pair.target, dtype=torch.float32).eval()


class Server:
    """One ``launch_server`` in its own process group, its log in ``log_path``."""

    def __init__(self, pair, tmp, port, name, env_extra=None, **flags):
        self.log_path = tmp / f"{name}.log"
        kw = dict(SERVER, model_path=pair.target, speculative_draft_model_path=pair.draft, host="127.0.0.1",
                  port=port, **flags)
        cmd = [sys.executable, "-m", "sglang.launch_server"]
        for key, value in kw.items():
            cmd += ["--" + key.replace("_", "-")] + ([] if value is True else [str(value)])
        self.env = {**H.subprocess_env(str(tmp)), **(env_extra or {})}
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True)
        self.base = f"http://127.0.0.1:{port}"

    def wait_healthy(self, timeout_s=300):
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "sglang_ddtree", "wait-healthy", "--url", self.base, "--pid",
                            str(self.proc.pid), "--log", str(self.log_path), "--timeout", str(timeout_s),
                            "--progress-every", "30"], env=self.env, capture_output=True, text=True)
        assert r.returncode == 0, f"wait-healthy exit {r.returncode}:\n{r.stdout}\n{r.stderr}\n{self.tail()}"
        return time.monotonic() - t0

    def tail(self, n=6000):
        self.log.flush()
        return open(self.log_path).read()[-n:]

    def stop(self, timeout_s=60):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self.log.close()


@pytest.fixture
def servers(pair, tmp_path):
    started = []

    def start(name, port=None, **kw):
        started.append(Server(pair, tmp_path, port or free_port(), name, **kw))
        return started[-1]

    yield start
    for s in started:
        s.stop()


def _send(base, timeout_s=REQUEST_TIMEOUT_S):
    return lambda spec: L.execute(base, spec, timeout_s)


def _assert_parity(target, divergences, what):
    failures, near_ties = H.near_tie_failures(target, divergences, EPSILON)
    assert not failures, f"{what}: divergences that are not float32 near-ties (EPSILON {EPSILON}):\n" + \
        "\n".join(failures[:20])
    print(f"{what}: {len(divergences)} divergent outputs, {near_ties} of them near-tie divergences")


def _record(name, data):
    keep = os.environ.get("SGLANG_DDTREE_KEEP_REPORTS")
    print(f"[faults] {name}: " + json.dumps({k: v for k, v in data.items() if k != "divergences"}, default=str))
    if keep:
        os.makedirs(keep, exist_ok=True)
        with open(os.path.join(keep, f"faults_{name}.json"), "w") as f:
            json.dump(data, f, indent=1, default=str)


def _greedy_spec(rid, p, ids, max_new):
    return L.Spec(rid, "greedy", p, tuple(ids), dict(temperature=0.0, max_new_tokens=max_new, ignore_eos=True))


# ---- the tests --------------------------------------------------------------------------------------------
def test_kv_pool_too_small_retracts_and_resumes(servers, prompts, target):
    kv_tokens, max_new, n = _env_num("DDTREE_FAULTS_KV_TOKENS", 4096), 240, 48
    srv = servers("kv_small", max_total_tokens=kv_tokens, max_running_requests=n,
                  env_extra={"SGLANG_INIT_NEW_TOKEN_RATIO": "0.05"})
    srv.wait_healthy()
    send = _send(srv.base)
    quiet = {}
    for p, ids in enumerate(prompts):
        o = send(_greedy_spec(f"quiet{p}", p, ids, max_new))
        assert o.status == "completed" and len(o.output_ids) == max_new, (p, o.status, o.error, srv.tail())
        quiet[p] = o.output_ids
    assert "Retract requests" not in srv.tail(10 ** 7), "the quiet run already retracted: the pool is too small"
    specs = [_greedy_spec(f"load{i}", i % len(prompts), prompts[i % len(prompts)], max_new) for i in range(n)]
    res = L.run_load(send, specs, n, duration_s=600, drain_s=300)
    log = srv.tail(10 ** 7)
    retractions = [line for line in log.splitlines() if "KV cache pool is full. Retract requests." in line]
    status, metrics = http(srv.base + "/metrics", timeout=30)
    retracted = L.metric_total(metrics, "sglang:num_retracted_requests_total") if status == 200 else None
    failures = [f"{o.spec.rid}: {o.status} {o.finish} {len(o.output_ids)}/{max_new} {o.error[:200]}"
                for o in res.outcomes if o.status != "completed" or len(o.output_ids) != max_new
                or (o.finish or {}).get("type") != "length"]
    divergences = [(f"{o.spec.rid} vs the quiet run", list(o.spec.input_ids), quiet[o.spec.prompt], o.output_ids)
                   for o in res.outcomes if not failures and o.output_ids != quiet[o.spec.prompt]]
    _record("kv_pool", dict(kv_tokens=kv_tokens, requests=n, max_new=max_new, seconds=round(res.seconds, 1),
                            retraction_log_lines=len(retractions), retractions_first=retractions[:3],
                            retracted_requests_metric=retracted, failures=failures, hung=res.hung,
                            divergent=len(divergences)))
    assert not res.hung, f"requests still running after the drain: {res.hung}\n{srv.tail()}"
    assert not failures, "\n".join(failures[:20]) + "\n" + srv.tail()
    assert retractions, f"no retraction happened with {kv_tokens} KV tokens for {n} x {max_new}: raise the load\n" \
        + srv.tail()
    _assert_parity(target, divergences, "after retraction vs the quiet run")
    o = send(_greedy_spec("after", 0, prompts[0], max_new))  # the server serves on, unchanged
    assert o.status == "completed" and o.output_ids == quiet[0], (o.status, o.error)


def _gpu_used_mib():
    try:
        L.nvidia_smi_used_mib(0)
        return lambda: L.nvidia_smi_used_mib(0)
    except (OSError, subprocess.SubprocessError):
        import torch

        def used():
            free, total = torch.cuda.mem_get_info(0)
            return (total - free) / 2 ** 20

        return used


def test_soak_mixed_requests_at_concurrency_64(servers, prompts, tok, target):
    seconds, conc = _env_num("DDTREE_SOAK_S", 240.0), _env_num("DDTREE_SOAK_CONCURRENCY", 64)
    warmup, growth = _env_num("DDTREE_SOAK_WARMUP_S", 60.0), _env_num("DDTREE_SOAK_GROWTH_MIB", 256.0)
    before = L.host_snapshot()  # what else runs on the machine (leftover servers) before the server starts
    srv = servers("soak", mem_fraction_static=0.4, max_total_tokens=65536, max_running_requests=conc)
    srv.wait_healthy()
    send = _send(srv.base)
    quiet = L.quiet_run(send, prompts)
    with L.MemorySampler(_gpu_used_mib(), every_s=2.0) as mem:
        res = L.run_load(send, L.request_mix(prompts, CONTEXT, seed=17), conc, seconds, drain_s=REQUEST_TIMEOUT_S + 60)
    verdict = L.check_outcomes(res.outcomes, quiet, lambda ids: tok.decode(ids, skip_special_tokens=True))
    flat = L.flatness(mem.samples, warmup, growth)
    done = sum(o.status in ("completed", "aborted", "disconnected", "http_error") for o in res.outcomes)
    _record("soak", dict(seconds=round(res.seconds, 1), concurrency=conc, requests=len(res.outcomes), done=done,
                         requests_per_s=round(len(res.outcomes) / res.seconds, 2), counts=verdict.counts,
                         failures=verdict.failures, hung=res.hung, divergent=len(verdict.divergences),
                         memory=flat, host_before=before, host_after=L.host_snapshot(), memory_samples=mem.samples))
    assert not res.hung, f"{len(res.hung)} requests still running after the drain: {res.hung[:10]}\n{srv.tail()}"
    assert srv.proc.poll() is None, "the server died under the soak:\n" + srv.tail()
    assert not verdict.failures, f"{len(verdict.failures)} of {len(res.outcomes)} requests broke a rule:\n" + \
        "\n".join(verdict.failures[:20]) + "\n" + srv.tail()
    assert set(verdict.counts) == set(L.KINDS), f"some request kinds never ran: {verdict.counts}"
    _assert_parity(target, verdict.divergences, "soak greedy outputs vs the quiet run")
    assert flat["ok"], f"GPU memory not flat: {flat['message']} ({flat})"
    after = L.quiet_run(send, prompts)  # the server serves on, unchanged
    _assert_parity(target, [(f"prompt {p} alone after the soak", prompts[p], quiet[p], after[p])
                            for p in quiet if after[p] != quiet[p]], "quiet run after the soak vs before")


def test_restart_under_load_with_retrying_clients(servers, prompts, target):
    load_s, down_at = _env_num("DDTREE_RESTART_LOAD_S", 150.0), _env_num("DDTREE_RESTART_AT_S", 15.0)
    port = free_port()
    first = servers("restart_first", port=port, mem_fraction_static=0.4, max_total_tokens=65536)
    first.wait_healthy()
    quiet = L.quiet_run(_send(first.base), prompts)
    events = {}

    def restart():
        time.sleep(down_at)
        events["sigterm"] = time.monotonic()
        first.stop()
        events["down"] = time.monotonic()
        second = servers("restart_second", port=port, mem_fraction_static=0.4, max_total_tokens=65536)
        events["healthy_after_s"] = second.wait_healthy()
        events["healthy"] = time.monotonic()

    t = threading.Thread(target=restart, daemon=True)
    mix = L.request_mix(prompts, CONTEXT, seed=5, weights={"greedy": 3, "stream": 1})
    send = lambda s: L.execute_with_retries(first.base, s, REQUEST_TIMEOUT_S, retry_for_s=240, backoff_s=1.0)  # noqa: E731
    t0 = time.monotonic()
    t.start()
    res = L.run_load(send, mix, 16, load_s, drain_s=300)
    t.join(timeout=10)
    verdict = L.check_outcomes(res.outcomes, quiet, lambda ids: "")
    retried = [o for o in res.outcomes if o.attempts > 1]
    after = [o for o in res.outcomes if "healthy" in events and o.t_start >= events["healthy"]]
    _record("restart", dict(seconds=round(res.seconds, 1), requests=len(res.outcomes), retried=len(retried),
                            max_attempts=max((o.attempts for o in res.outcomes), default=0),
                            started_after_restart=len(after), counts=verdict.counts, failures=verdict.failures,
                            hung=res.hung, divergent=len(verdict.divergences),
                            events={k: (round(v - t0, 1) if k != "healthy_after_s" else round(v, 1))
                                    for k, v in events.items()}))
    assert "healthy" in events, f"the second server never became healthy: {events}"
    assert not res.hung and not verdict.failures, "\n".join(verdict.failures[:20] + res.hung[:10])
    assert retried, "no request met the restart (none needed a second attempt)"
    assert after and all(o.status == "completed" for o in after), "no request was served by the new server"
    _assert_parity(target, verdict.divergences, "across the restart vs the first server's quiet run")
