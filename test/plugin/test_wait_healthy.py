"""``python -m sglang_ddtree wait-healthy`` against a fake server on 127.0.0.1 (CPU, no SGLang needed).

The fake server (``FAKE_SERVER``, http.server) runs as a subprocess in one mode per test: healthy, slow
to start, dying with a log line, dying while a request is in flight, /generate failing. wait-healthy
must exit 0 once it serves, 1 within seconds of the server's death (measured from the moment it
died) with the log's tail and the fix, 3 at --timeout, 2 on bad arguments. Plus the cause table.
"""

import contextlib
import os
import subprocess
import sys
import time

import pytest

from sglang_ddtree.wait_healthy import CAUSES, SERVER_ERROR, diagnose, read_log_end

FAKE_SERVER = r'''
import http.server, json, os, sys, threading, time
mode, port_file, log_file, died_file = sys.argv[1:5]
log = open(log_file, "a", buffering=1)

def die():
    log.write("[scheduler] Traceback (most recent call last):\n")
    log.write("ModuleNotFoundError: No module named 'jsonschema'\n")
    log.close()
    with open(died_file, "w") as f:
        f.write(repr(time.time()))
    os._exit(1)

class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        log.write("request %s\n" % (a[1:],))

    def answer(self, code, body=b""):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if mode == "hang-dies":
            time.sleep(60)
        self.answer(503 if mode == "dies" else 200)

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if mode == "gen500":
            return self.answer(500, b"Internal Server Error")
        self.answer(200, json.dumps({"text": "!", "meta_info": {}}).encode())

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
server.daemon_threads = True
server.server_bind()  # bound, not listening: connections are refused until server_activate()
log.write("server starting on port %d\n" % server.server_address[1])
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.replace(port_file + ".tmp", port_file)
if mode == "slow":
    time.sleep(2.0)
server.server_activate()
if mode in ("dies", "hang-dies"):
    threading.Timer(1.5, die).start()
threading.Timer(120, lambda: os._exit(0)).start()  # bounded even if a test forgets it
server.serve_forever()
'''


@contextlib.contextmanager
def fake_server(tmp_path, mode):
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    port_file, log, died = tmp_path / "port", tmp_path / "server.log", tmp_path / "died_at"
    proc = subprocess.Popen([sys.executable, str(script), mode, str(port_file), str(log), str(died)])
    try:
        for _ in range(200):  # <= 10 s for the port
            if port_file.exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert port_file.exists(), f"fake server did not start (rc {proc.poll()})"
        yield proc, f"http://127.0.0.1:{port_file.read_text()}", str(log), died
    finally:
        proc.kill()
        proc.wait(timeout=10)


def wait_healthy(*args, env=None, timeout=30):
    """Run the command; returns (CompletedProcess, wall-clock time at its exit)."""
    proc = subprocess.run([sys.executable, "-m", "sglang_ddtree", "wait-healthy", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)
    return proc, time.time()


def test_healthy_server_exits_0_quickly(tmp_path):
    with fake_server(tmp_path, "healthy") as (proc, url, log, _):
        t0 = time.monotonic()
        out, _ = wait_healthy("--url", url, "--pid", str(proc.pid), "--log", log)
        assert out.returncode == 0, out.stderr
        assert time.monotonic() - t0 < 10
        assert out.stdout.startswith(f"wait-healthy: {url} serves") and " s" in out.stdout, out.stdout
        assert out.stderr == ""
        requests = open(log).read()
        assert "GET /health" in requests and "POST /generate" in requests


def test_slow_start_waits_with_progress_lines_then_exits_0(tmp_path):
    with fake_server(tmp_path, "slow") as (proc, url, log, _):
        out, _ = wait_healthy("--url", url, "--pid", str(proc.pid), "--interval", "0.2", "--progress-every", "0.5")
        assert out.returncode == 0, out.stderr
        assert f"wait-healthy: waiting for {url}: " in out.stderr, out.stderr
        assert f"/health: connection refused, pid {proc.pid} alive" in out.stderr, out.stderr


def _assert_died_with_the_fix(out, t_exit, died, log):
    assert out.returncode == 1, out.stdout + out.stderr
    death_to_exit = t_exit - float(died.read_text())
    print(f"death to exit: {death_to_exit:.2f} s")
    assert death_to_exit < 10, death_to_exit
    err = out.stderr
    assert "died after" in err and f"--- last " in err and f"lines of {log} ---" in err, err
    assert "ModuleNotFoundError: No module named 'jsonschema'" in err, err
    assert ("cause (missing module): ModuleNotFoundError: No module named 'jsonschema'\n"
            "  fix: missing Python module jsonschema: pip install jsonschema "
            "(then run python -m sglang_ddtree doctor)") in err, err
    return death_to_exit


@pytest.mark.parametrize("mode", ["dies", "hang-dies"])  # hang-dies: it dies while /health is in flight
def test_server_death_exits_1_within_seconds_with_the_log_tail_and_fix(tmp_path, mode):
    with fake_server(tmp_path, mode) as (proc, url, log, died):
        out, t_exit = wait_healthy("--url", url, "--pid", str(proc.pid), "--log", log)
        _assert_died_with_the_fix(out, t_exit, died, log)


def test_generate_failing_keeps_waiting_until_the_timeout_exit_3(tmp_path):
    with fake_server(tmp_path, "gen500") as (proc, url, log, _):
        t0 = time.monotonic()
        out, _ = wait_healthy("--url", url, "--pid", str(proc.pid), "--log", log, "--timeout", "3", "--quiet")
        assert out.returncode == 3, out.stderr
        assert 3 <= time.monotonic() - t0 < 15
        assert "timed out after 3 s; last: /generate: HTTP 500 Internal Server Error" in out.stderr, out.stderr
        assert out.stderr.count("POST /generate") >= 2  # it asked again, not once (the tail shows the requests)
        assert "waiting for" not in out.stderr and out.stdout == ""  # --quiet


@pytest.mark.parametrize("args, says", [
    (["--url", "ftp://127.0.0.1:30000"], "argument --url: must be a base URL like http://127.0.0.1:30000"),
    (["--url", "http://:30000"], "argument --url: must be a base URL"),
    (["--url", "http://127.0.0.1:notaport"], "argument --url: bad port"),
    (["--url", "http://127.0.0.1:30000", "--pid", "0"], "argument --pid: must be an integer >= 1, got '0'"),
    (["--url", "http://127.0.0.1:30000", "--timeout", "soon"], "argument --timeout: must be a number"),
    (["--pid", "1"], "the following arguments are required: --url"),
])
def test_bad_arguments_exit_2_with_one_error_line(args, says):
    out, _ = wait_healthy(*args)
    assert out.returncode == 2 and out.stdout == ""
    assert says in out.stderr.strip().splitlines()[-1], out.stderr


def test_pid_of_a_dead_process_exits_1_at_once(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    t0 = time.monotonic()
    out, _ = wait_healthy("--url", "http://127.0.0.1:9", "--pid", str(dead.pid))
    assert out.returncode == 1, out.stderr
    assert time.monotonic() - t0 < 5
    assert f"process {dead.pid} died" in out.stderr and "pass --log FILE" in out.stderr


def _fake_systemd(tmp_path, pid, log):
    """systemctl / journalctl stand-ins on PATH: MainPID is ``pid``; the journal is ``log``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(f"#!/bin/sh\necho {pid}\n")
    (bin_dir / "journalctl").write_text(f"#!/bin/sh\ncat '{log}'\n")
    for name in ("systemctl", "journalctl"):
        os.chmod(bin_dir / name, 0o755)
    return dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


def test_unit_main_pid_is_watched_and_its_journal_tailed(tmp_path):
    with fake_server(tmp_path, "dies") as (proc, url, log, died):
        env = _fake_systemd(tmp_path, proc.pid, log)
        out, t_exit = wait_healthy("--url", url, "--unit", "sglang.service", env=env)
        assert out.returncode == 1, out.stderr
        assert t_exit - float(died.read_text()) < 10
        assert f"unit sglang.service's main process {proc.pid} died" in out.stderr, out.stderr
        assert "lines of journalctl -u sglang.service ---" in out.stderr
        assert "pip install jsonschema" in out.stderr


def test_unit_with_no_main_process_exits_1_at_once(tmp_path):
    log = tmp_path / "journal"
    log.write_text("sglang.service: Failed with result 'exit-code'.\n")
    out, _ = wait_healthy("--url", "http://127.0.0.1:9", "--unit", "sglang.service", env=_fake_systemd(tmp_path, 0, log))
    assert out.returncode == 1, out.stderr
    assert "unit sglang.service has no main process (MainPID 0: not running, or no such unit)" in out.stderr
    assert "Failed with result 'exit-code'." in out.stderr


def test_unit_without_systemctl_is_one_clear_error(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # nothing on PATH
    out, _ = wait_healthy("--url", "http://127.0.0.1:9", "--unit", "sglang.service", env=env)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        "python -m sglang_ddtree wait-healthy: error: --unit needs systemd, and systemctl is not on PATH here: "
        "pass --pid instead")


# The cause table: one real-looking line per kind -> that kind and its fix.
CAUSE_CASES = [
    ("ModuleNotFoundError: No module named 'jsonschema'", "missing module", "pip install jsonschema (then run "
     "python -m sglang_ddtree doctor)"),
    ("ImportError: No module named multipart", "missing module", "pip install python-multipart"),
    ("ModuleNotFoundError: No module named 'sglang.srt.layers.foo'", "missing module",
     "sglang.srt.layers.foo is missing from the installed sglang: the installed versions do not match: run python "
     "-m sglang_ddtree doctor"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "CUDA out of memory",
     "lower --mem-fraction-static"),
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "KV cache does not fit",
     "raise --mem-fraction-static"),
    ("Exception: Capture cuda graph failed: an illegal memory access", "CUDA graph capture failed",
     "--cuda-graph-backend-decode=disabled (old spelling --disable-cuda-graph)"),
    ("RuntimeError: operation not permitted when stream is capturing", "CUDA graph capture failed", "report it"),
    ("ImportError: /venv/sgl_kernel/common_ops.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEi", "build mismatch",
     "torch / sgl-kernel / flashinfer builds do not match (each other or this CUDA): run python -m sglang_ddtree "
     "doctor"),
    ("OSError: libcudart.so.13: cannot open shared object file: No such file or directory", "build mismatch", "doctor"),
    ("RuntimeError: flashinfer-cubin version (0.5.2) does not match flashinfer version (0.5.3)", "build mismatch",
     "doctor"),
    ("sglang: error: --speculative-ddtree-budget must be in [1, 1024], got 0.", "argument error",
     "the server refused its command line"),
    ("launch_server.py: error: unrecognized arguments: --foo", "argument error", "--help lists the flags"),
    ("ERROR: [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use",
     "port busy", "ss -ltnp | grep :30000"),
    ("ValueError: Cannot find model module. 'NoSuchDraftModel' is not a registered model in the Transformers library",
     "unknown model architecture", "no model class for NoSuchDraftModel"),
    ("ValueError: Model architectures ['Qwen9ForCausalLM'] are not supported for now. Supported architectures: [...]",
     "unknown model architecture", "no model class for ['Qwen9ForCausalLM']"),
]


@pytest.mark.parametrize("line, kind, fix", CAUSE_CASES, ids=[f"{c[1]}-{i}" for i, c in enumerate(CAUSE_CASES)])
def test_cause_table_recognises_each_kind(line, kind, fix):
    found = diagnose(["[2026-12-01 10:00:00] some ordinary line", line], port=30000)
    assert [d.kind for d in found] == [kind]
    assert found[0].line == line and fix in found[0].fix, found[0].fix


def test_every_kind_has_a_case_and_the_first_match_per_kind_is_reported():
    assert {c.kind for c in CAUSES} == {kind for _, kind, _ in CAUSE_CASES}
    found = diagnose(["No module named 'aaa'", "No module named 'bbb'", "CUDA out of memory",
                      "Capture cuda graph failed: CUDA out of memory"])
    assert [(d.kind, d.line) for d in found] == [("missing module", "No module named 'aaa'"),
                                                 ("CUDA out of memory", "CUDA out of memory"),
                                                 ("CUDA graph capture failed",
                                                  "Capture cuda graph failed: CUDA out of memory")]


def test_a_normal_startup_log_shows_no_cause():
    normal = [
        "[2026-12-01 10:00:00] server_args=ServerArgs(model_path='/models/qwen3', mem_fraction_static=0.8, "
        "disable_cuda_graph=False, speculative_algorithm='DDTREE')",
        "Load weight begin. avail mem=139.20 GB",
        "Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=123.10 GB, mem usage=16.10 GB.",
        "KV Cache is allocated. #tokens: 901120, K size: 49.50 GB, V size: 49.50 GB",
        "Capture cuda graph begin. This can take up to several minutes. avail mem=20.51 GB",
        "Capture cuda graph end. Time elapsed: 12.34 s. mem usage=1.20 GB. avail mem=19.31 GB.",
        "INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
        "The server is fired up and ready to roll!",
        # SGLang's model registry skips model modules with a missing optional dependency and carries on
        "[2026-12-03 04:17:37] Ignore import error when loading sglang.srt.models.inkling: No module named 'helion'",
    ]
    assert diagnose(normal) == []


def test_real_h200_log_of_a_dead_server_names_its_cause_not_a_skipped_model_module():
    """The log of a real server (SGLang 0.5.16 on the H200, session 16, `rollout.sh fail`) that died of an unknown
    drafter architecture: before the fix the only cause shown was the registry's harmless 'No module named helion'."""
    lines = read_log_end(os.path.join(os.path.dirname(__file__), "data", "server_died_unknown_drafter_arch_h200.log"))
    found = diagnose(lines, port=30002)
    assert [d.kind for d in found] == ["unknown model architecture"]
    assert "'NoSuchDraftModel' is not a registered model" in found[0].line and "helion" not in found[0].fix


def test_an_unrecognised_last_exception_is_reported_as_the_server_error():
    lines = ["[2026-12-01] Scheduler hit an exception: Traceback (most recent call last):",
             '  File "/x/sglang/srt/managers/scheduler.py", line 1, in run', "    raise ValueError(",
             "KeyError: 'first, handled'", "sglang.srt.utils.SomethingWrongError: the tokenizer has no pad id"]
    assert [(d.kind, d.line) for d in diagnose(lines)] == [
        (SERVER_ERROR, "sglang.srt.utils.SomethingWrongError: the tokenizer has no pad id")]
    assert "report it with the log" in diagnose(lines)[0].fix
    # a recognised last exception is reported once, as its cause
    oom = lines[:3] + ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    assert [d.kind for d in diagnose(oom)] == ["CUDA out of memory"]


def test_read_log_end_drops_the_cut_line_and_colour_codes(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("x" * 100 + "\n" + "\x1b[31mModuleNotFoundError: No module named 'jsonschema'\x1b[0m\n")
    assert read_log_end(str(path), max_bytes=70) == ["ModuleNotFoundError: No module named 'jsonschema'"]
    assert read_log_end(str(path))[0] == "x" * 100


def test_help_is_plain_text_and_lists_the_exit_codes():
    out, _ = wait_healthy("--help")
    assert out.returncode == 0 and "usage: python -m sglang_ddtree wait-healthy" in out.stdout
    assert "`" not in out.stdout and "0 serving, 1 the process died, 2 bad arguments, 3 timed out" in " ".join(
        out.stdout.split()), out.stdout
