"""``python -m sglang_ddtree wait-healthy``: wait until an SGLang server serves, or say why it died.

For roll-outs (shell scripts, systemd ``ExecStartPost=``): polls ``GET /health``, then one tiny
``POST /generate`` (1 token, greedy), until both answer 200, while watching the server's process
(``--pid``, or a systemd unit's main PID). When that process dies it exits within about a second,
printing the tail of the server's log and, where the table ``CAUSES`` recognises it, the cause and
the fix. Exit codes: ``EXIT_SERVING`` 0, ``EXIT_DIED`` 1, ``EXIT_USAGE`` 2, ``EXIT_TIMEOUT`` 3.
Standard library only: it imports neither torch nor SGLang, so it runs in any Python 3.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

EXIT_SERVING, EXIT_DIED, EXIT_USAGE, EXIT_TIMEOUT = 0, 1, 2, 3
REQUEST_TIMEOUT_S = 30.0  # one HTTP request; SGLang's /health itself may take up to 20 s (HEALTH_CHECK_TIMEOUT)
WATCH_STEP_S = 0.2  # how often the process is checked while a request is in flight
LOG_SCAN_BYTES = 256 * 1024  # the diagnosis reads this much of the log's end; the tail shows --lines of it
GENERATE_BODY = {"text": "Hi", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
NOT_ASKED = "not asked yet"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

DESCRIPTION = (
    "Wait until an SGLang server serves: GET /health answers 200 and one tiny POST /generate (SGLang's native "
    "API, 1 token, greedy) answers 200 with a text. Watches the server's process (--pid, or --unit for a systemd "
    "unit's main PID) and, when it dies, exits at once with the tail of its log (--log, or the unit's journal) and "
    "the recognised cause and fix. A progress line goes to stderr every --progress-every seconds. Exit codes: "
    "0 serving, 1 the process died, 2 bad arguments, 3 timed out. Connects directly (no proxy).")


# ---------------------------------------------------------------------------------------------------
# Diagnosis: what a dead server's log says, and what to do about it.

class Cause(NamedTuple):
    kind: str
    pattern: "re.Pattern[str]"  # searched line by line
    fix: Callable[["re.Match[str]", Optional[int]], str]  # (match, the server's port) -> advice


class Diagnosis(NamedTuple):
    kind: str
    line: str  # the log line that matched
    fix: str


_PIP_NAMES = {"cv2": "opencv-python", "PIL": "pillow", "yaml": "pyyaml", "sklearn": "scikit-learn",
              "multipart": "python-multipart", "zmq": "pyzmq", "google": "protobuf", "sgl_kernel": "sglang-kernel"}
_STACK = ("sglang", "sglang_ddtree", "sgl_kernel", "flashinfer", "torch", "triton")
DOCTOR = "run python -m sglang_ddtree doctor"


def _missing_module_fix(m: "re.Match[str]", port: Optional[int]) -> str:
    name = m.group(1)
    top = name.split(".")[0]
    if "." in name and top in _STACK:
        return f"{name} is missing from the installed {top}: the installed versions do not match: {DOCTOR}"
    return f"missing Python module {name}: pip install {_PIP_NAMES.get(top, top)} (then {DOCTOR})"


CAUSES: Tuple[Cause, ...] = (
    Cause("missing module", re.compile(r"No module named '?([A-Za-z_][\w.]*)'?"), _missing_module_fix),
    Cause("CUDA out of memory",
          re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED"),
          lambda m, port: "the GPU ran out of memory: lower --mem-fraction-static (e.g. 0.8, then 0.7), "
                          "--max-running-requests or --cuda-graph-max-bs-decode (old spelling --cuda-graph-max-bs)"),
    Cause("KV cache does not fit", re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static"),
          lambda m, port: "no room left for the KV cache after the weights: raise --mem-fraction-static, "
                          "or lower --context-length / --max-running-requests"),
    Cause("CUDA graph capture failed",
          re.compile(r"Capture (?:prefill )?cuda graph failed|CUDA graph capture (?:failed|error)|"
                     r"stream is capturing|cudaErrorStreamCapture", re.I),
          lambda m, port: "restart with --cuda-graph-backend-decode=disabled (old spelling --disable-cuda-graph) "
                          "to confirm the capture is the cause; if that serves, report it with this log "
                          "(lowering --cuda-graph-max-bs-decode may avoid it meanwhile)"),
    Cause("build mismatch",
          re.compile(r"undefined symbol|lib(?:cudart|cublas\w*|cudnn\w*|nvrtc|nccl|torch\w*|c10\w*)\.so[.\d]*: "
                     r"cannot open shared object file|(?:ImportError|OSError).*\b(?:sgl_kernel|flashinfer)\b|"
                     r"Could not load any common_ops library|flashinfer.{0,80}\b(?:does not match|mismatch)|"
                     r"(?:does not match|mismatch).{0,80}\bflashinfer\b|CUDA driver version is insufficient|"
                     r"NVIDIA driver on your system is too old"),
          lambda m, port: f"torch / sgl-kernel / flashinfer builds do not match (each other or this CUDA): {DOCTOR}"),
    Cause("argument error", re.compile(r"^(?:sglang|[\w.\-]+\.py|python3? -m [\w.]+(?: [\w-]+)?): error: .+"),
          lambda m, port: "the server refused its command line (the line above says which flag): fix it; "
                          "python -m sglang.launch_server --help lists the flags"),
    Cause("port busy", re.compile(r"address already in use|Port is already in use", re.I),
          lambda m, port: "another process holds the server's port (an old server?): stop it "
                          f"(ss -ltnp | grep :{port or 'PORT'}) or start the server with another --port"),
    Cause("unknown model architecture",
          re.compile(r"'([\w.]+)' is not a registered model|Model architectures (\[[^\]]*\]) are not supported"),
          lambda m, port: f"this SGLang has no model class for {m.group(1) or m.group(2)} (the architectures of the "
                          "config.json of --model-path or --speculative-draft-model-path): check that path (a DFlash "
                          "drafter's config names DFlashDraftModel); a newer model may need a newer SGLang: " + DOCTOR),
)
# Lines that look like a cause and are not one: SGLang's model registry logs every model module it cannot import
# (an optional dependency of a model nobody asked for, e.g. "... sglang.srt.models.inkling: No module named
# 'helion'") and carries on; seen on the H200 as the only "cause" of a server that died of something else.
BENIGN = re.compile(r"Ignore import error when loading ")
# A Python exception's last line ("ValueError: ...", "torch.OutOfMemoryError: ..."): the error a server died of.
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt): \S")
SERVER_ERROR = "server error"


def diagnose(lines: Sequence[str], port: Optional[int] = None) -> List[Diagnosis]:
    """The causes ``lines`` show, in table order, the first matching line of each kind (``BENIGN`` lines
    skipped); then, when the log's last exception line matched none of them, that line as ``SERVER_ERROR``."""
    found, last_exception = {}, None
    for line in lines:
        if BENIGN.search(line):
            continue
        if _EXCEPTION_LINE.match(line.strip()):
            last_exception = line.strip()
        for cause in CAUSES:
            if cause.kind not in found:
                m = cause.pattern.search(line)
                if m:
                    found[cause.kind] = Diagnosis(cause.kind, line.strip()[:300], cause.fix(m, port))
    out = [found[c.kind] for c in CAUSES if c.kind in found]
    if last_exception is not None and not any(c.pattern.search(last_exception) for c in CAUSES):
        out.append(Diagnosis(SERVER_ERROR, last_exception[:300],
                             "the server stopped with this error (its traceback is in the log above): fix what it "
                             "names; if it names nothing of your set-up, report it with the log (" + DOCTOR + ")"))
    return out


def read_log_end(path: str, max_bytes: int = LOG_SCAN_BYTES) -> List[str]:
    """The last ``max_bytes`` of a log file as lines (a cut first line dropped, colour codes removed)."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - max_bytes))
        lines = _ANSI.sub("", f.read().decode("utf-8", "replace")).splitlines()
    return lines[1:] if size > max_bytes else lines


# ---------------------------------------------------------------------------------------------------
# The watched process.

def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (exited, not yet reaped) counts as dead."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):  # no /proc here: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # exists, owned by another user
            pass
        return True


class UsageError(Exception):
    """A bad argument or an unusable environment (exit code 2), as one line."""


def unit_main_pid(unit: str) -> int:
    """The systemd unit's MainPID (0 when it has no running main process)."""
    try:
        out = subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", unit], capture_output=True,
                             text=True, timeout=10)
    except FileNotFoundError:
        raise UsageError("--unit needs systemd, and systemctl is not on PATH here: pass --pid instead") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"systemctl show {unit} did not answer in 10 s") from None
    text = out.stdout.strip()
    if out.returncode != 0 or not text.isdigit():
        why = (out.stderr.strip() or text or f"exit code {out.returncode}").splitlines()[0]
        raise UsageError(f"systemctl show -p MainPID {unit} failed: {why}")
    return int(text)


class Watch:
    """The process whose death ends the wait: ``--pid``, and/or ``--unit`` (its MainPID, re-read each poll)."""

    def __init__(self, pid: Optional[int], unit: Optional[str]):
        self.pid, self.unit = pid, unit
        self.unit_pid = unit_main_pid(unit) if unit else None
        self.gone: Optional[str] = None  # why the process counts as dead, once it does

    def check(self, reread_unit: bool = False) -> bool:
        """True while every watched process runs; else sets ``gone``."""
        if self.gone is None and self.pid is not None and not pid_alive(self.pid):
            self.gone = f"process {self.pid} died"
        if self.gone is None and self.unit is not None:
            now = self.unit_pid
            if reread_unit and now:
                try:
                    now = unit_main_pid(self.unit)
                except UsageError:  # systemctl hiccup: keep watching the PID it gave
                    pass
            if not self.unit_pid:
                self.gone = f"unit {self.unit} has no main process (MainPID 0: not running, or no such unit)"
            elif now != self.unit_pid or not pid_alive(now):
                now_is = f" (MainPID now {now})" if now != self.unit_pid else ""
                self.gone = f"unit {self.unit}'s main process {self.unit_pid} died{now_is}"
        return self.gone is None

    def describe(self) -> str:
        parts = ([f"pid {self.pid}"] if self.pid else []) + ([f"unit {self.unit} (pid {self.unit_pid})"]
                                                             if self.unit else [])
        return (", ".join(parts) + " alive") if parts else "no process watched"


# ---------------------------------------------------------------------------------------------------
# The wait.

def _parse_url(text: str) -> str:
    u = urllib.parse.urlsplit(text)
    try:
        u.port
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad port in {text!r}") from None
    if u.scheme not in ("http", "https") or not u.hostname or u.query or u.fragment:
        raise argparse.ArgumentTypeError(f"must be a base URL like http://127.0.0.1:30000, got {text!r}")
    return text.rstrip("/")


def _number(lo: float, kind: type = float) -> Callable[[str], float]:
    def parse(text: str):
        try:
            value = kind(text)
            if not value >= lo:
                raise ValueError
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a{'n integer' if kind is int else ' number'} >= {lo}, "
                                             f"got {text!r}") from None
        return value
    return parse


def _request(url: str, body: Optional[dict], api_key: Optional[str], timeout: float) -> Tuple[bool, str]:
    """One HTTP request: (True, "") on 200 (with a "text" for /generate), else (False, what happened)."""
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers, method="POST" if body is not None else "GET")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as resp:
            payload = resp.read()
    except urllib.error.HTTPError as e:
        try:
            said = e.read(200).decode("utf-8", "replace").strip()
        except OSError:
            said = ""
        return False, f"HTTP {e.code} {said}".strip()
    except urllib.error.URLError as e:
        reason = e.reason
        return False, ("connection refused" if isinstance(reason, ConnectionRefusedError) else str(reason))
    except (OSError, ValueError) as e:  # timeouts, resets, bad status lines
        return False, f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    if body is None:
        return True, ""
    try:
        out = json.loads(payload)
        items = out if isinstance(out, list) else [out]
        if items and all(isinstance(x, dict) and "text" in x for x in items):
            return True, ""
    except ValueError:
        pass
    return False, f"HTTP 200 without a generated text: {payload[:200]!r}"


class _Waiter:
    def __init__(self, args: argparse.Namespace, watch: Watch):
        self.args, self.watch = args, watch
        self.start = time.monotonic()
        self.deadline = self.start + args.timeout
        self.next_progress = self.start + args.progress_every
        self.status = NOT_ASKED

    def tick(self, status: Optional[str] = None) -> bool:
        """Between polls and while a request is in flight: False once the process died or time ran out."""
        now = time.monotonic()
        if status is not None:
            self.status = status
        if not self.args.quiet and now >= self.next_progress:
            print(f"wait-healthy: waiting for {self.args.url}: {now - self.start:.0f} s, {self.status}, "
                  f"{self.watch.describe()}", file=sys.stderr, flush=True)
            self.next_progress = now + self.args.progress_every
        return self.watch.check() and now < self.deadline

    def ask(self, path: str, body: Optional[dict]) -> Optional[bool]:
        """One request, the process watched meanwhile: True/False as answered, None if cut short."""
        result: List[Tuple[bool, str]] = []
        timeout = max(0.5, min(REQUEST_TIMEOUT_S, self.deadline - time.monotonic()))
        t = threading.Thread(target=lambda: result.append(_request(self.args.url + path, body, self.args.api_key,
                                                                     timeout)), daemon=True)
        sent = time.monotonic()
        t.start()
        while True:
            t.join(WATCH_STEP_S)
            if result:
                ok, what = result[0]
                self.status = f"{path}: {'200' if ok else what}"
                return ok
            if not self.tick(f"{path}: no answer yet ({time.monotonic() - sent:.0f} s)"):
                return None

    def run(self) -> int:
        while self.watch.check(reread_unit=True):
            if self.ask("/health", None) and self.ask("/generate", GENERATE_BODY):
                if not self.watch.check(reread_unit=True):  # someone else (an old server?) answered
                    break
                if not self.args.quiet:
                    print(f"wait-healthy: {self.args.url} serves (/health and a 1-token /generate answered) after "
                          f"{time.monotonic() - self.start:.1f} s", flush=True)
                return EXIT_SERVING
            next_poll = time.monotonic() + self.args.interval
            while self.tick() and time.monotonic() < next_poll:
                time.sleep(min(WATCH_STEP_S, max(0.0, next_poll - time.monotonic())))
            if self.watch.gone is None and time.monotonic() >= self.deadline:
                self.report(f"timed out after {self.args.timeout:g} s; last: {self.status}; {self.watch.describe()}")
                return EXIT_TIMEOUT
        last = f"; last: {self.status}" if self.status != NOT_ASKED else ""
        self.report(f"{self.watch.gone} after {time.monotonic() - self.start:.1f} s of waiting{last}")
        return EXIT_DIED

    def log_lines(self) -> Tuple[str, Optional[List[str]]]:
        if self.args.log:
            try:
                return self.args.log, read_log_end(self.args.log)
            except OSError as e:
                return self.args.log, [f"(cannot read it: {e.strerror or e})"]
        if self.args.unit:
            cmd = ["journalctl", "-u", self.args.unit, "-n", str(max(400, self.args.lines)), "--no-pager", "-o", "cat"]
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
                return f"journalctl -u {self.args.unit}", _ANSI.sub("", out.stdout or out.stderr).splitlines()
            except (OSError, subprocess.TimeoutExpired) as e:
                return f"journalctl -u {self.args.unit}", [f"(cannot read it: {e})"]
        return "", None

    def report(self, headline: str) -> None:
        print(f"wait-healthy: {self.args.url}: {headline}", file=sys.stderr)
        where, lines = self.log_lines()
        if lines is None:
            print("wait-healthy: pass --log FILE (the server's output) to see its tail and the cause here",
                  file=sys.stderr)
            return
        tail = lines[-self.args.lines:]
        print(f"--- last {len(tail)} lines of {where} ---", *tail, "---", sep="\n", file=sys.stderr)
        for d in diagnose(lines, urllib.parse.urlsplit(self.args.url).port):
            print(f"cause ({d.kind}): {d.line}\n  fix: {d.fix}", file=sys.stderr)
        sys.stderr.flush()


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m sglang_ddtree wait-healthy", description=DESCRIPTION)
    ap.add_argument("--url", required=True, type=_parse_url, metavar="URL", help="the server's base URL, e.g. http://127.0.0.1:30000")
    ap.add_argument("--pid", type=_number(1, int), metavar="PID", help="the server's process id (systemd: --pid $MAINPID)")
    ap.add_argument("--unit", metavar="NAME", help="a systemd unit whose main process is the server (needs systemctl)")
    ap.add_argument("--log", metavar="FILE", help="the server's log file: its tail and the recognised cause are shown on failure "
                                  "(default with --unit: the unit's journal)")
    ap.add_argument("--lines", type=_number(1, int), default=40, metavar="N", help="log lines shown on failure (default 40)")
    ap.add_argument("--timeout", type=_number(0.1), default=900.0, metavar="S", help="give up after this many seconds, exit "
                                                                        "code 3 (default 900)")
    ap.add_argument("--interval", type=_number(0.05), default=1.0, metavar="S", help="seconds between polls (default 1)")
    ap.add_argument("--progress-every", type=_number(0.1), default=10.0, metavar="S",
                    help="seconds between progress lines on stderr (default 10)")
    ap.add_argument("--api-key", metavar="KEY", help="the server's --api-key, if it has one (/generate needs it)")
    ap.add_argument("--quiet", action="store_true", help="no progress or success line; failures are still printed")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        watch = Watch(args.pid, args.unit)
    except UsageError as e:
        ap.error(str(e))
    try:
        return _Waiter(args, watch).run()
    except KeyboardInterrupt:
        print("wait-healthy: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
