"""docker/: the image definition, its entrypoint and the compose file, checked on CPU without Docker.

The Dockerfile is parsed the way Docker's own parser reads it (comments dropped, ``\\``-continued lines
joined, nothing else changed), and the two pieces of shell in it that decide things, the build-time
doctor gate and the entrypoint, are RUN here under ``sh`` against a stand-in ``python3``, so their
behaviour (not just their text) is tested. Nothing here builds or runs an image.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCKER = os.path.join(ROOT, "docker")
DOCKERFILE = os.path.join(DOCKER, "Dockerfile")
SH = shutil.which("sh") or "/bin/sh"

DOCTOR_CHECKS = ("plugin entry point", "sglang", "torch", "sgl-kernel", "flashinfer", "GPU", "upstream symbols",
                 "server runtime modules")


def _instructions(path=DOCKERFILE):
    """[(INSTRUCTION, arguments)] as Docker's parser sees them (default escape character ``\\``)."""
    out, buf = [], None
    with open(path) as f:
        for raw in f.read().splitlines():
            if buf is None:
                if not raw.strip() or raw.lstrip().startswith("#"):
                    continue
                buf = raw.lstrip()
            elif raw.lstrip().startswith("#"):  # comment lines inside a continued instruction are dropped
                continue
            else:
                buf += raw
            if buf.endswith("\\"):
                buf = buf[:-1]
                continue
            instr, _, args = buf.partition(" ")
            out.append((instr.upper(), args.strip()))
            buf = None
    assert buf is None, "the Dockerfile ends inside a continued instruction"
    return out


def _stages():
    """[[(INSTRUCTION, arguments)] of one stage] in order; stage 0 is what comes before the first FROM."""
    stages = [[]]
    for instr, args in _instructions():
        if instr == "FROM":
            stages.append([])
        stages[-1].append((instr, args))
    return stages


def _runs(stage):
    return [args for instr, args in stage if instr == "RUN"]


def _doctor_gate():
    gates = [r for r in _runs(_stages()[-1]) if "sglang_ddtree doctor --json" in r]
    assert len(gates) == 1, "the final stage must run `python3 -m sglang_ddtree doctor --json` exactly once"
    return gates[0]


def _version_constants():
    text = open(os.path.join(ROOT, "python", "sglang_ddtree", "version.py")).read()
    return dict(re.findall(r'^(SUPPORTED_SGLANG_MIN|SUPPORTED_SGLANG_MAX_EXCLUSIVE|__version__) = "([^"]+)"', text, re.M))


# ---- the Dockerfile's text ------------------------------------------------------------------------------

def test_base_image_arg_is_upstreams_cuda13_image_of_a_supported_sglang():
    from packaging.version import Version

    instr, args = _instructions()[0]
    assert instr == "ARG", "the first instruction must be the base image ARG (usable in every FROM)"
    name, _, default = args.partition("=")
    assert name == "SGLANG_IMAGE"
    m = re.fullmatch(r"lmsysorg/sglang:v(\d+\.\d+\.\d+(?:\.post\d+)?)-cu130", default)
    assert m, f"{default!r} is not upstream's CUDA 13 tag pattern lmsysorg/sglang:v<version>-cu130"
    v = _version_constants()
    assert Version(v["SUPPORTED_SGLANG_MIN"]) <= Version(m.group(1)) < Version(v["SUPPORTED_SGLANG_MAX_EXCLUSIVE"]), (
        f"the default image's sglang {m.group(1)} is outside the supported range in version.py")


def test_two_stages_wheel_then_sglang_image():
    stages = _stages()
    assert len(stages) == 3, "expected exactly two stages: the wheel build and the image"
    assert stages[1][0] == ("FROM", "${SGLANG_IMAGE} AS wheel")
    assert any(re.search(r"\bpip wheel\b.*--no-deps\b.*\s\.(\s|$)", r) for r in _runs(stages[1]))
    assert stages[2][0][0] == "FROM" and stages[2][0][1].split()[0] == "${SGLANG_IMAGE}"
    assert ("COPY", "--from=wheel /dist/ /tmp/sglang-ddtree-dist/") in stages[2]


def test_the_wheel_is_installed_with_no_deps_and_nothing_else_is_pip_installed():
    installs = [r for r in _runs(_stages()[-1]) if re.search(r"\bpip install\b", r)]
    assert len(installs) == 1, installs
    assert "--no-deps" in installs[0].split() and "sglang_ddtree-*.whl" in installs[0]
    assert not any(re.search(r"\b(pip|uv) (install|uninstall)\b", r) for r in _runs(_stages()[-1]) if r != installs[0]), (
        "the image must keep the base image's torch / sgl-kernel / flashinfer / sglang untouched")


def test_wheel_sources_exist_and_are_let_through_the_dockerignore():
    copies = [args.split() for instr, args in _stages()[1] + _stages()[2] if instr == "COPY"]
    sources = [s for parts in copies if not parts[0].startswith("--") for s in parts[:-1]]
    assert set(sources) == {"setup.py", "pyproject.toml", "README.md", "python", "docker/entrypoint.sh"}
    ignore = [line.strip() for line in open(os.path.join(DOCKER, "Dockerfile.dockerignore")) if line.strip()
              and not line.startswith("#")]
    assert ignore[0] == "*", "the context is the whole repository (.venv, .device, ...): exclude by default"
    for src in sources:
        assert os.path.exists(os.path.join(ROOT, src)), src
        assert f"!{src}" in ignore, f"{src} is copied but excluded by docker/Dockerfile.dockerignore"


def test_doctor_gate_is_present_and_exempts_only_the_gpu_check():
    gate = _doctor_gate()
    assert "python3 -m sglang_ddtree doctor --json" in gate
    exempt = re.findall(r'c\["name"\] != "([^"]+)"', gate)
    assert exempt == ["GPU"]
    assert 'c["required"]' in gate and 'c["status"] == "FAIL"' in gate


def test_no_model_weights_in_the_image():
    text = " ".join(args for _, args in _instructions())
    for forbidden in ("snapshot_download", "huggingface-cli", "hf download", "/root/.cache/huggingface", "--model-path"):
        assert forbidden not in text, f"{forbidden!r}: the model belongs in the mounted HF cache, not the image"


def _healthcheck():
    hc = [args for instr, args in _instructions() if instr == "HEALTHCHECK"]
    assert len(hc) == 1
    opts, _, cmd = hc[0].partition(" CMD ")
    return dict(re.findall(r"--([a-z-]+)=(\S+)", opts)), json.loads(cmd)


def test_healthcheck_is_wait_healthy_on_the_served_port_within_dockers_timeout():
    opts, cmd = _healthcheck()
    assert cmd[:2] == ["/bin/sh", "-c"] and len(cmd) == 3, cmd
    assert "python3 -m sglang_ddtree wait-healthy" in cmd[2] and "http://127.0.0.1:${PORT:-30000}" in cmd[2]
    inner = float(re.search(r"--timeout (\d+)", cmd[2]).group(1))
    assert inner + 5 <= float(opts["timeout"].rstrip("s")), (inner, opts)  # wait-healthy ends first
    assert cmd[2].rstrip().endswith("|| exit 1")  # its exit codes 2 / 3 are not HEALTHCHECK codes
    assert ("EXPOSE", "30000") in _instructions()


def _run_healthcheck(tmp_path, rc, **env):
    fake = _fake_python3(tmp_path, f'echo "python3 $*"; exit {rc}')
    fake.pop("PORT", None)
    fake.pop("SGLANG_DDTREE_HEALTH_API_KEY", None)
    return subprocess.run(_healthcheck()[1], env={**fake, **env}, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("rc, want", [(0, 0), (1, 1), (2, 1), (3, 1)])
def test_healthcheck_command_runs_and_maps_exit_codes(tmp_path, rc, want):
    proc = _run_healthcheck(tmp_path, rc)
    assert proc.returncode == want
    assert proc.stdout.split() == ["python3", "-m", "sglang_ddtree", "wait-healthy", "--url",
                                   "http://127.0.0.1:30000", "--timeout", "20", "--interval", "2", "--quiet"]
    proc = _run_healthcheck(tmp_path, 0, PORT="8000", SGLANG_DDTREE_HEALTH_API_KEY="k")
    assert "--url http://127.0.0.1:8000 " in proc.stdout and proc.stdout.split()[-2:] == ["--api-key", "k"]


def test_healthcheck_against_a_real_wait_healthy_and_a_dead_port(tmp_path):
    """The real command, the real wait-healthy: nothing listens, so it must report unhealthy (1), in time."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**_fake_python3(tmp_path, ""), "PORT": str(port)}
    cmd = _healthcheck()[1]
    cmd[2] = cmd[2].replace("--timeout 20", "--timeout 2")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "timed out" in proc.stdout + proc.stderr


def test_entrypoint_and_default_command():
    instrs = _instructions()
    ep = [json.loads(args) for instr, args in instrs if instr == "ENTRYPOINT"]
    cmd = [json.loads(args) for instr, args in instrs if instr == "CMD"]
    assert ep == [["/usr/local/bin/sglang-ddtree-entrypoint"]] and cmd == [["--help"]]
    assert ("COPY", "docker/entrypoint.sh /usr/local/bin/sglang-ddtree-entrypoint") in instrs


# ---- the shell in it, run under sh ---------------------------------------------------------------------

def _fake_python3(tmp_path, body):
    """A ``python3`` on PATH: ``body`` (sh) runs first and may exit; otherwise the real interpreter runs."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    shim = bindir / "python3"
    shim.write_text(f"#!{SH}\n{body}\nexec {sys.executable} \"$@\"\n")
    shim.chmod(0o755)
    return {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}


def _report(failing=(), warn=(), noise=""):
    from sglang_ddtree.doctor import Check

    checks = []
    for name in DOCTOR_CHECKS:
        if name in failing:
            checks.append(Check(name, "FAIL", f"{name} is broken", f"fix {name}"))
        elif name in warn:
            checks.append(Check(name, "WARN", f"{name} is odd", required=False))
        else:
            checks.append(Check(name, "OK", f"{name} fine"))
    ok = not any(c.status == "FAIL" and c.required for c in checks)
    return noise + json.dumps({"ok": ok, "checks": [asdict(c) for c in checks]}, indent=1) + "\n", 0 if ok else 1


def _run_gate(tmp_path, stdout, rc):
    (tmp_path / "doctor.out").write_text(stdout)
    env = _fake_python3(tmp_path, f'if [ "$1 $2 $3" = "-m sglang_ddtree doctor" ]; then '
                                  f'cat "{tmp_path}/doctor.out"; exit {rc}; fi')
    return subprocess.run([SH, "-c", _doctor_gate()], env=env, capture_output=True, text=True, timeout=60)


def test_gate_passes_when_only_the_gpu_check_fails(tmp_path):
    proc = _run_gate(tmp_path, *_report(failing=("GPU",)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[FAIL] GPU: GPU is broken" in proc.stdout and "fix: fix GPU" in proc.stdout
    assert "all required checks other than GPU passed" in proc.stdout


@pytest.mark.parametrize("broken", ["sgl-kernel", "upstream symbols", "server runtime modules", "plugin entry point"])
def test_gate_fails_the_build_on_any_other_required_check(tmp_path, broken):
    proc = _run_gate(tmp_path, *_report(failing=("GPU", broken)))
    assert proc.returncode != 0
    assert f"doctor gate FAILED: required checks failed: {broken}" in proc.stderr


def test_gate_reads_the_report_after_noise_and_ignores_warnings(tmp_path):
    noise = "some module printed this\n{not json}\n"
    proc = _run_gate(tmp_path, *_report(failing=("GPU",), warn=("flashinfer",), noise=noise))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[WARN] flashinfer" in proc.stdout


def test_gate_fails_when_the_doctor_crashes(tmp_path):
    proc = _run_gate(tmp_path, "", 1)
    assert proc.returncode != 0 and "no JSON report" in proc.stderr


DOCTOR_RUN = "python3 -m sglang_ddtree doctor"


def _run_entrypoint(tmp_path, *args, port=None, doctor_rc=0, mode=None, want_rc=0):
    env = _fake_python3(tmp_path, f'echo "python3 $*"; [ "$*" = "-m sglang_ddtree doctor" ] && exit {doctor_rc}; exit 0')
    env.pop("PORT", None)
    env.pop("SGLANG_DDTREE_DOCTOR", None)
    if port:
        env["PORT"] = port
    if mode is not None:
        env["SGLANG_DDTREE_DOCTOR"] = mode
    proc = subprocess.run([SH, os.path.join(DOCKER, "entrypoint.sh"), *args], env=env, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == want_rc, proc.stdout + proc.stderr
    return proc.stdout.strip(), proc.stderr


def test_entrypoint_runs_the_doctor_then_the_server_on_all_interfaces(tmp_path):
    served = "python3 -m sglang.launch_server --host 0.0.0.0 --port"
    out, _ = _run_entrypoint(tmp_path, "--model-path", "T", "--speculative-algorithm", "DDTREE")
    assert out.splitlines() == [DOCTOR_RUN, f"{served} 30000 --model-path T --speculative-algorithm DDTREE"]
    assert _run_entrypoint(tmp_path, "--help", port="8000")[0] == f"{served} 8000 --help"  # no doctor for --help
    assert _run_entrypoint(tmp_path)[0] == f"{served} 30000"


def test_entrypoint_stops_on_a_failed_doctor_unless_told_otherwise(tmp_path):
    out, err = _run_entrypoint(tmp_path, "--model-path", "T", doctor_rc=1, want_rc=1)
    assert out == DOCTOR_RUN and "not starting the server" in err and "SGLANG_DDTREE_DOCTOR=warn" in err
    out, err = _run_entrypoint(tmp_path, "--model-path", "T", doctor_rc=1, mode="warn")
    assert out.splitlines()[-1].endswith("--port 30000 --model-path T") and "starting anyway" in err
    out, _ = _run_entrypoint(tmp_path, "--model-path", "T", doctor_rc=1, mode="off")
    assert DOCTOR_RUN not in out and out.endswith("--model-path T")
    _, err = _run_entrypoint(tmp_path, "--model-path", "T", mode="sometimes", want_rc=2)
    assert "use fail, warn or off" in err


def test_entrypoint_runs_other_commands_as_given(tmp_path):
    assert _run_entrypoint(tmp_path, "python3", "-m", "sglang_ddtree", "doctor")[0] == DOCTOR_RUN


# ---- compose and README ------------------------------------------------------------------------------

def _ddtree_fields():
    text = open(os.path.join(ROOT, "python", "sglang_ddtree", "server_args.py")).read()
    return set(re.findall(r"^\s+(speculative_ddtree_\w+):", text, re.M))


def test_compose_file_is_valid_yaml_with_the_ddtree_flags():
    yaml = pytest.importorskip("yaml")
    with open(os.path.join(DOCKER, "compose.yaml")) as f:
        compose = yaml.safe_load(f)
    (name, svc), = compose["services"].items()
    assert svc["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}
    assert svc["entrypoint"] == "python3 -m sglang.launch_server"
    cmd = svc["command"].split()
    for flag, value in (("--speculative-algorithm", "DDTREE"), ("--attention-backend", "triton"),
                        ("--host", "0.0.0.0"), ("--port", "30000")):
        assert cmd[cmd.index(flag) + 1] == value, flag
    assert "--speculative-ddtree-budget" not in cmd  # the default: budget auto on a dense target (session 44)
    assert "--speculative-draft-model-path" in cmd and "--model-path" in cmd
    for flag in cmd:
        if flag.startswith("--speculative-ddtree-"):
            assert flag[2:].replace("-", "_") in _ddtree_fields(), f"{flag} is not a DDTREE flag"
    assert "${HOME}/.cache/huggingface:/root/.cache/huggingface" in svc["volumes"]
    assert svc["ipc"] == "host" and "30000:30000" in svc["ports"]
    assert "/health" in " ".join(svc["healthcheck"]["test"])
    assert svc["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]


def test_readme_build_and_run_commands():
    text = open(os.path.join(DOCKER, "README.md")).read()
    assert f"docker build -f docker/Dockerfile -t sglang-ddtree:{_version_constants()['__version__']} ." in text
    assert "--build-arg SGLANG_IMAGE=" in text
    for needle in ("--gpus all", "--ipc=host", "-p 30000:30000", "-v ~/.cache/huggingface:/root/.cache/huggingface",
                   "--speculative-algorithm DDTREE", "--speculative-draft-model-path", "--speculative-ddtree-budget 64",
                   "`auto`: each round verifies the tree size that pays",
                   "--attention-backend triton", "python3 -m sglang_ddtree doctor", "cu128", "trtllm_mha",
                   "--mamba-scheduler-strategy extra_buffer", "docker info"):
        assert needle in text, needle
    for flag in re.findall(r"--speculative-ddtree-[a-z-]+", text):
        assert flag[2:].replace("-", "_") in _ddtree_fields(), f"{flag} is not a DDTREE flag"
