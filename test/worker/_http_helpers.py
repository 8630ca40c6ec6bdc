"""Tiny HTTP client helpers for the GPU tests that start ``sglang.launch_server`` (stdlib only)."""

import json
import socket
import urllib.error
import urllib.request


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, data=None, timeout=120):
    """GET (``data`` None) or POST JSON; returns (status, body text), HTTP errors included."""
    req = urllib.request.Request(url, data=None if data is None else json.dumps(data).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait_healthy(base: str, proc, log_path, timeout_s: float = 300.0) -> None:
    """Poll ``base``/health until 200; fail with the server log's tail if ``proc`` exits or time runs out."""
    import time

    deadline = time.time() + timeout_s
    while True:
        assert proc.poll() is None, "server exited:\n" + open(log_path).read()[-6000:]
        assert time.time() < deadline, f"server not healthy after {timeout_s:.0f} s:\n" + open(log_path).read()[-6000:]
        try:
            if http(base + "/health", timeout=5)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(2)
