"""deploy/: the systemd unit and its environment file, checked on CPU without systemd running.

The unit is read the way systemd reads it (comments dropped, ``\\``-continued lines joined with a space,
keys that repeat kept in order); its command lines are expanded the way systemd expands them at start
(``%n``, ``${VAR}`` as one argument, a lone ``$VAR`` split at whitespace, ``$$`` for ``$``) with the
unit's Environment= defaults overridden by deploy/sglang-ddtree.env. Then: the wait-healthy line
parses with our CLI's own parser, TimeoutStartSec= exceeds its --timeout, every launch_server flag
parses with SGLang's own ServerArgs parser (DDTREE flags included, through the plugin), the
required-settings check is run under ``sh``, and ``systemd-analyze verify`` reads the unit.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(ROOT, "deploy")
UNIT = os.path.join(DEPLOY, "sglang-ddtree.service")
ENV_FILE = os.path.join(DEPLOY, "sglang-ddtree.env")
UNIT_NAME = os.path.basename(UNIT)
SH = shutil.which("sh") or "/bin/sh"


def parse_unit(path=UNIT):
    """{section: [(key, value)]} in file order, as systemd's parser joins and strips lines."""
    sections, current, buf = {}, None, None
    with open(path) as f:
        for raw in f.read().splitlines():
            line = raw.strip()
            if buf is None:
                if not line or line[0] in "#;":
                    continue
                if line.startswith("[") and line.endswith("]"):
                    current = sections.setdefault(line[1:-1], [])
                    continue
                buf = line
            elif line.startswith(("#", ";")):  # comment lines inside a continuation are skipped
                continue
            else:
                buf += " " + line
            if buf.endswith("\\"):
                buf = buf[:-1].rstrip()
                continue
            assert current is not None and "=" in buf, f"not a key=value line in a section: {buf!r}"
            key, _, value = buf.partition("=")
            current.append((key.strip(), value.strip()))
            buf = None
    assert buf is None, "the unit ends inside a continued line"
    return sections


def values(section, key, unit=None):
    return [v for k, v in (unit or parse_unit())[section] if k == key]


def one(section, key, unit=None):
    got = values(section, key, unit)
    assert len(got) == 1, f"{section}/{key}: {got}"
    return got[0]


def seconds(text):
    m = re.fullmatch(r"(\d+)(s|min)?", text)
    assert m, f"not a plain time span: {text!r}"
    return int(m.group(1)) * (60 if m.group(2) == "min" else 1)


def read_env_file(path=ENV_FILE, commented=False):
    """{VAR: value} of an EnvironmentFile; with ``commented``, also the ``#VAR=value`` examples."""
    out = {}
    with open(path) as f:
        for line in f.read().splitlines():
            m = re.match(r"^(#)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line.strip())
            if m and (commented or not m.group(1)):
                out[m.group(2)] = m.group(3)
    return out


def service_env(**overrides):
    """The environment systemd gives the unit's commands: Environment= defaults, then the env file."""
    env = {}
    for assignment in values("Service", "Environment"):
        for word in shlex.split(assignment):
            key, _, value = word.partition("=")
            env[key] = value
    env.update(read_env_file())
    env.update(overrides)
    return env


def expand(command, env):
    """A unit's command line as the argv systemd executes (prefixes like ``-`` / ``+`` are not used here)."""
    assert command[0] not in "-+!@:", "the unit's commands take no prefixes; a failure must fail the start"
    argv = []
    for word in shlex.split(command.replace("%%", "\0").replace("%n", UNIT_NAME).replace("\0", "%")):
        lone = re.fullmatch(r"\$([A-Za-z_]\w*)", word)
        if lone:
            argv += env.get(lone.group(1), "").split()
        else:
            argv.append(re.sub(r"\$\$|\$\{([A-Za-z_]\w*)\}",
                               lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), ""), word))
    return argv


def _venv_python_module(argv, module):
    """argv of ``<venv python> -m <module> ...``: the arguments after the module."""
    assert argv[0].endswith("/bin/python") and argv[1:3] == ["-m", module], argv
    return argv[3:]


# ---------------------------------------------------------------------------------------------------

def test_unit_restarts_sanely_and_reads_its_environment_file():
    unit = parse_unit()
    assert one("Service", "Type", unit) == "exec"
    assert one("Service", "User", unit) and one("Service", "Group", unit)
    assert one("Service", "EnvironmentFile", unit) == "/etc/sglang-ddtree.env"
    assert one("Service", "Restart", unit) == "on-failure"
    restart_s = seconds(one("Service", "RestartSec", unit))
    burst = int(one("Unit", "StartLimitBurst", unit))
    interval_s = seconds(one("Unit", "StartLimitIntervalSec", unit))
    start_s = seconds(one("Service", "TimeoutStartSec", unit))
    assert 5 <= restart_s <= 120 and 2 <= burst <= 5
    # The limit must be able to trip: `burst` starts that fail fast (the doctor, a bad flag) fit in the interval.
    assert interval_s > burst * (restart_s + 60) and interval_s >= start_s
    assert one("Install", "WantedBy", unit) == "multi-user.target"


def test_wait_healthy_line_parses_with_our_cli_and_fits_in_the_start_timeout():
    from sglang_ddtree.wait_healthy import build_parser

    env = service_env()
    post = values("Service", "ExecStartPost")
    assert len(post) == 1
    argv = _venv_python_module(expand(post[0], env), "sglang_ddtree")
    assert argv[0] == "wait-healthy"
    args = build_parser().parse_args(argv[1:])
    assert args.url == f"http://127.0.0.1:{env['DDTREE_PORT']}" and env["DDTREE_PORT"] == "30001"
    assert args.unit == UNIT_NAME and args.pid is None
    assert args.timeout == 900
    assert seconds(one("Service", "TimeoutStartSec")) > args.timeout + 60  # + the doctor and the other checks
    # wait-healthy shows the tail of the file the server writes to.
    assert one("Service", "StandardOutput") == f"append:{args.log}"
    assert one("Service", "StandardError") == "inherit"


def test_our_cli_has_the_subcommands_the_unit_runs():
    out = subprocess.run([sys.executable, "-m", "sglang_ddtree", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and "doctor" in out.stdout and "wait-healthy" in out.stdout
    out = subprocess.run([sys.executable, "-m", "sglang_ddtree", "wait-healthy", "--help"], capture_output=True,
                         text=True, timeout=60)
    for flag in ("--url", "--unit", "--log", "--timeout"):
        assert flag in out.stdout


def test_start_pre_checks_the_settings_then_runs_the_doctor(tmp_path):
    pre = values("Service", "ExecStartPre")
    assert len(pre) == 2
    env = service_env()
    assert _venv_python_module(expand(pre[1], env), "sglang_ddtree") == ["doctor"]
    check = expand(pre[0], env)
    assert check[:2] == ["/bin/sh", "-c"] and len(check) == 3
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    ok = subprocess.run([SH, "-c", check[2]], env={**base, **env}, capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stderr == ""
    for var in ("DDTREE_TARGET_MODEL", "DDTREE_DRAFT_MODEL", "CUDA_VISIBLE_DEVICES"):
        for broken in ({k: v for k, v in env.items() if k != var}, {**env, var: ""}):
            bad = subprocess.run([SH, "-c", check[2]], env={**base, **broken}, capture_output=True, text=True)
            assert bad.returncode == 1, var
            assert bad.stderr.strip() == ("sglang-ddtree: set DDTREE_TARGET_MODEL, DDTREE_DRAFT_MODEL and "
                                          "CUDA_VISIBLE_DEVICES in /etc/sglang-ddtree.env")


def test_every_variable_the_unit_reads_has_a_default_or_is_in_the_env_file():
    with open(UNIT) as f:
        text = "\n".join(line for line in f.read().splitlines() if not line.lstrip().startswith("#"))
    used = set(re.findall(r"(?<!\$)\$\{?([A-Za-z_]\w*)", text.replace("$$", "")))
    defaults = {k for k in service_env() if k not in read_env_file()}
    documented = set(read_env_file(commented=True))
    assert used <= defaults | documented, used - defaults - documented
    required = used - defaults
    assert required == {"DDTREE_TARGET_MODEL", "DDTREE_DRAFT_MODEL"}, required
    assert required <= set(read_env_file()) and read_env_file()["CUDA_VISIBLE_DEVICES"]
    for var in defaults & documented:  # a commented example in the env file shows the unit's default
        example = read_env_file(commented=True)[var]
        assert var == "DDTREE_EXTRA_ARGS" or example == service_env()[var], var


def _launch_argv(**overrides):
    start = values("Service", "ExecStart")
    assert len(start) == 1
    return _venv_python_module(expand(start[0], service_env(**overrides)), "sglang.launch_server")


def test_launch_server_flags_exist_in_sglang_and_parse(sglang_with_plugin):
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    known = {opt for action in parser._actions for opt in action.option_strings}
    with open(ENV_FILE) as f:
        env_flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", f.read()))
    argv = _launch_argv()
    for flag in {a for a in argv if a.startswith("--")} | env_flags:
        assert flag in known, f"{flag} is not a flag of SGLang's launch_server"
    args = parser.parse_args(argv)
    assert (args.speculative_algorithm, args.port, args.host) == ("DDTREE", 30001, "127.0.0.1")
    assert (args.speculative_ddtree_budget, args.speculative_ddtree_topk, args.attention_backend) == (64, 8, "triton")
    assert args.model_path == "/models/Qwen3-8B" and args.speculative_draft_model_path.endswith("DFlash-b16")
    example = read_env_file(commented=True)["DDTREE_EXTRA_ARGS"]
    assert example, "the env file shows an example DDTREE_EXTRA_ARGS"
    args = parser.parse_args(_launch_argv(DDTREE_EXTRA_ARGS=example))
    assert args.mem_fraction_static == 0.85 and args.enable_metrics


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify_reads_the_unit(tmp_path):
    # verify checks that each command's executable exists: point the venv's python at a stand-in.
    stub = tmp_path / "python"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    with open(UNIT) as f:
        text = f.read().replace("/opt/sglang-ddtree/venv/bin/python", str(stub))
    unit = tmp_path / UNIT_NAME
    unit.write_text(text)
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=120)
    ours = [line for line in (out.stdout + out.stderr).splitlines() if UNIT_NAME in line]
    assert out.returncode == 0 and not ours, out.stdout + out.stderr


def test_readme_names_only_files_that_exist():
    with open(os.path.join(DEPLOY, "README.md")) as f:
        text = f.read()
    paths = set(re.findall(r"(?<![\w/.])((?:deploy|scripts|docker|python|test)/[\w./-]+\w)", text))
    assert {"deploy/sglang-ddtree.service", "deploy/sglang-ddtree.env", "scripts/build_wheelhouse.py"} <= paths
    for path in paths:
        assert os.path.exists(os.path.join(ROOT, path)), path
