#!/usr/bin/env python3
"""Build an offline wheelhouse for air-gapped GPU nodes: sglang_ddtree's wheel, the pinned SGLang and every
wheel they require, for one target CPython version and Linux platform.

  [1/4] build our wheel (``pip wheel --no-deps`` on a copy of the files it is built from: the checkout
        gains no build/ or egg-info);
  [2/4] ``pip download --only-binary=:all:`` it with ``sglang==<pinned>`` and all their requirements, for
        ``--python`` / ``--platform`` (skipped with ``--no-sglang``: a wheelhouse of our wheel alone);
  [3/4] write requirements.txt (every wheel there, pinned, with its sha256) and INSTALL.txt;
  [4/4] check that the wheelhouse alone resolves: ``pip install --dry-run --no-index --find-links DIR -r
        requirements.txt`` for the same target, with pip's configuration and PIP_* variables switched off,
        so nothing outside DIR can fill a gap.
pip evaluates requirement markers (``python_version``, ``platform_machine``) for the interpreter it runs
in, whatever ``--python-version`` says, so pip runs under an interpreter of the target version when one
is found (``--python /path/to/python3.12``, or ``python3.12`` on PATH). Standard library only.
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import urllib.parse
import urllib.request
import zipfile
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VERSION_FILE = os.path.join(ROOT, "python", "sglang_ddtree", "version.py")
BUILD_FILES = ("setup.py", "pyproject.toml", "README.md", "python")  # what the wheel is built from
REQUIREMENTS, INSTALL = "requirements.txt", "INSTALL.txt"
# sglang 0.5.16 ships cp3XX manylinux_2_34 wheels only: the node needs glibc >= 2.34. A tag stands for itself and
# every older manylinux tag (platform_tags: torch 2.11.0's wheels are manylinux_2_28).
DEFAULT_PLATFORM = "manylinux_2_34_x86_64"
MIN_PIP = (23, 0)  # pip install --dry-run --report, pip --python
# sglang 0.5.16 pins torch 2.11.0, whose Linux wheels on PyPI are the CUDA 13.0 build (cuda-toolkit 13.0.2),
# as sglang-kernel 0.4.5 and flashinfer's cu13 extra need; the PyTorch index has the same build as +cu130.
TORCH_CUDA_MAJOR = 13
PYTORCH_INDEX = "https://download.pytorch.org/whl/cu130"
TAIL_LINES = 15  # pip lines shown above a failure that were hidden while it ran
_SHOWN = ("Collecting", "Downloading", "Saved", "File was already downloaded", "Successfully", "Would install",
          "ERROR", "WARNING")
_PLATFORM_TAG = re.compile(r"^(?:manylinux_\d+_\d+|manylinux1|manylinux2010|manylinux2014|musllinux_\d+_\d+|linux)"
                           r"_(x86_64|aarch64|i686|ppc64le|s390x|armv7l)$")
_WHEEL_NAME = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")
_NOISE = re.compile(r"WARNING: Location '.*' is ignored")  # a configured index without that project
_NETWORK = re.compile(r"Failed to establish a new connection|Temporary failure in name resolution|Network is "
                      r"unreachable|Max retries exceeded|Could not fetch URL|timed out|Name or service not known")


class WheelhouseError(Exception):
    """A failure the user can act on, as one line (exit code 1)."""


def say(text: str) -> None:
    print(f"build_wheelhouse: {text}", flush=True)


def pinned_versions(path: str = VERSION_FILE) -> Tuple[str, str, str]:
    """(our version, SGLang MIN, SGLang MAX_EXCLUSIVE) from version.py, read without importing the package."""
    with open(path) as f:
        values = dict(re.findall(r'^(__version__|SUPPORTED_SGLANG_MIN|SUPPORTED_SGLANG_MAX_EXCLUSIVE) = "([^"]+)"',
                                 f.read(), re.M))
    return values["__version__"], values["SUPPORTED_SGLANG_MIN"], values["SUPPORTED_SGLANG_MAX_EXCLUSIVE"]


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------------------------------------------
# Arguments and the interpreter pip runs in.

def _python_arg(text: str) -> str:
    if re.fullmatch(r"\d+\.\d+", text):
        if tuple(int(x) for x in text.split(".")) < (3, 10):
            raise argparse.ArgumentTypeError(f"sglang and sglang_ddtree need Python >= 3.10, got {text}")
        return text
    if os.sep in text or os.path.isfile(text):
        return text
    raise argparse.ArgumentTypeError(f"a version like 3.12 or a path to a python interpreter, got {text!r}")


def _platform_arg(text: str) -> str:
    if not _PLATFORM_TAG.match(text):
        raise argparse.ArgumentTypeError(f"a Linux wheel platform tag like {DEFAULT_PLATFORM} (SGLang serves on "
                                         f"Linux), got {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    ours, lo, hi = pinned_versions()
    ap = argparse.ArgumentParser(
        prog="scripts/build_wheelhouse.py",
        description=f"Build an offline wheelhouse: sglang_ddtree {ours}, sglang=={lo} (the supported range is "
                    f">={lo},<{hi}) and every wheel they require, for one CPython version and Linux platform; "
                    "writes requirements.txt and INSTALL.txt and checks that the wheelhouse resolves offline.")
    ap.add_argument("--out", required=True, metavar="DIR", help="the wheelhouse directory (created if missing)")
    ap.add_argument("--python", type=_python_arg, metavar="X.Y|PATH",
                    help="target CPython: a version (default: this interpreter's) or an interpreter to run pip "
                         "in, whose version is the target's (exact requirement markers)")
    ap.add_argument("--platform", type=_platform_arg, action="append", metavar="TAG",
                    help=f"target wheel platform tag, repeatable for variants of one architecture (default "
                         f"{DEFAULT_PLATFORM}: sglang 0.5.16's wheels need glibc >= 2.34); a manylinux tag "
                         "stands for itself and every older one")
    ap.add_argument("--index-url", metavar="URL", help="pip's --index-url (default: pip's configuration, PyPI)")
    ap.add_argument("--extra-index-url", action="append", default=[], metavar="URL",
                    help=f"an extra index, repeatable; e.g. {PYTORCH_INDEX} for torch's +cu130 wheels (PyPI's "
                         "torch 2.11.0 Linux wheels are already the CUDA 13.0 build)")
    ap.add_argument("--find-links", action="append", default=[], metavar="PATH|URL",
                    help="a directory or page of wheels to take from, repeatable (e.g. a local mirror)")
    ap.add_argument("--no-index", action="store_true", help="use only --find-links (with pip's --no-index)")
    ap.add_argument("--no-sglang", action="store_true",
                    help="only our wheel, installed with --no-deps on a node that has SGLang already")
    ap.add_argument("--no-build-isolation", action="store_true",
                    help="build our wheel with this Python's setuptools and wheel (no index needed for them)")
    ap.add_argument("--verbose", action="store_true", help="show all of pip's output")
    return ap


class Target(NamedTuple):
    python: str  # "3.12"
    platforms: Tuple[str, ...]
    pip_python: Optional[str]  # the interpreter pip runs in (pip --python); None: this one


def _interpreter_version(path: str) -> Optional[Tuple[str, str]]:
    """(X.Y, implementation name) of the interpreter at ``path``; None if it does not run."""
    try:
        out = subprocess.run([path, "-c", "import sys; print('%d.%d' % sys.version_info[:2], "
                                          "sys.implementation.name)"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    parts = out.stdout.split()
    return (parts[0], parts[1]) if out.returncode == 0 and len(parts) == 2 else None


def resolve_target(args: argparse.Namespace) -> Target:
    here = "%d.%d" % sys.version_info[:2]
    platforms = tuple(args.platform or [DEFAULT_PLATFORM])
    arches = sorted({_PLATFORM_TAG.match(p).group(1) for p in platforms})
    if len(arches) > 1:
        raise WheelhouseError(f"--platform mixes architectures ({', '.join(arches)}): build one wheelhouse per "
                              "architecture")
    pip_python = None
    if args.python is None or args.python == here:
        python = here
    elif re.fullmatch(r"\d+\.\d+", args.python):
        python = args.python
        found = shutil.which(f"python{python}")
        if found and _interpreter_version(found) == (python, "cpython"):
            pip_python = found
        else:
            say(f"warning: no python{python} found on PATH: pip evaluates requirement markers for this "
                f"Python {here}, so a requirement only Python {python} needs may be missing (or one only {here} "
                f"needs added); pass --python /path/to/python{python} for an exact set")
    else:
        got = _interpreter_version(args.python)
        if got is None:
            raise WheelhouseError(f"--python {args.python} does not run as a Python interpreter")
        if got[1] != "cpython" or int(got[0].split(".")[1]) < 10:
            raise WheelhouseError(f"--python {args.python} is {got[1]} {got[0]}: a CPython >= 3.10 is needed")
        python, pip_python = got[0], args.python
    if sys.platform != "linux" or platform.machine() != arches[0]:
        say(f"warning: this is {sys.platform} {platform.machine()}, the target linux {arches[0]}: requirement "
            "markers on the platform (sys_platform, platform_machine) are evaluated for this machine")
    return Target(python, platforms, pip_python)


# ---------------------------------------------------------------------------------------------------
# pip.

def _pip_reason(lines: Sequence[str], target: Optional[Target]) -> str:
    """One line saying why pip failed, with what to do where that is known."""
    text = "\n".join(lines)
    m = re.search(r"No module named '?(setuptools|wheel)\b", text)
    if m:
        return (f"this Python has no {m.group(1)}, which --no-build-isolation builds with: pip install "
                "'setuptools>=61' wheel, or drop --no-build-isolation")
    missing = re.search(r"No matching distribution found for (\S+)", text)
    if _NETWORK.search(text):
        first = next(line.strip() for line in lines if _NETWORK.search(line))
        return f"the package index cannot be reached ({first[:160]}): check the network, or pass --index-url of a mirror"
    if missing:
        req = missing.group(1)
        if canonical(re.split(r"[=<>!~;\[ ]", req)[0]) == "torch" and "+cu" in req:
            return f"no wheel for {req}: pass --extra-index-url {PYTORCH_INDEX}"
        where = f"CPython {target.python} on {', '.join(target.platforms)}" if target else "this target"
        return (f"no wheel for {req} for {where} (a wheelhouse holds wheels only; pip's list above has only "
                "versions with a wheel for this target): check --python / --platform (a wheel for a newer glibc "
                "needs a newer manylinux tag), or add an index that has one (--extra-index-url, --find-links)")
    if "ResolutionImpossible" in text or "conflict is caused by" in text:
        cause = [line.strip() for line in lines if re.match(r"\s+\S+ \S+ depends on ", line)]
        return "conflicting requirements: " + ("; ".join(cause[:4]) or "see pip's output above")
    errors = [line.strip() for line in lines if line.lstrip().startswith("ERROR")]
    return (errors[-1] if errors else (lines[-1].strip() if lines else "no output"))[:300]


def run_pip(pip_args: Sequence[str], what: str, verbose: bool, target: Optional[Target] = None,
            isolated: bool = False) -> List[str]:
    """Run pip (under ``target.pip_python`` when set), showing its progress lines; raise on failure.

    ``isolated``: without pip's configuration files and PIP_* variables (the offline check)."""
    cmd = [sys.executable, "-m", "pip"] + (["--python", target.pip_python] if target and target.pip_python else [])
    env = None
    if isolated:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = subprocess.Popen(cmd + list(pip_args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, bufsize=1)
    lines, hidden = [], []
    for raw in proc.stdout:
        line = raw.rstrip()
        lines.append(line)
        if verbose or (line.lstrip().startswith(_SHOWN) and not _NOISE.search(line)):
            print(f"  {line if verbose or len(line) <= 300 else line[:300] + ' ...'}", flush=True)
            hidden.clear()
        else:
            hidden.append(line)
    if proc.wait() != 0:
        for line in hidden[-TAIL_LINES:]:
            print(f"  {line}", file=sys.stderr)
        raise WheelhouseError(f"{what} failed (pip exit code {proc.returncode}): {_pip_reason(lines, target)}")
    return lines


def check_pip() -> None:
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise WheelhouseError(f"cannot run {sys.executable} -m pip: {e}") from None
    m = re.match(r"pip (\d+)\.(\d+)", out.stdout)
    if out.returncode != 0 or not m:
        raise WheelhouseError(f"{sys.executable} has no pip: run this script with a Python that has pip >= "
                              f"{MIN_PIP[0]}.{MIN_PIP[1]} (a venv)")
    if (int(m.group(1)), int(m.group(2))) < MIN_PIP:
        raise WheelhouseError(f"{out.stdout.split(' from ')[0]} is too old (>= {MIN_PIP[0]}.{MIN_PIP[1]} needed for "
                              f"--dry-run --report): {sys.executable} -m pip install -U pip")


_LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}


def platform_tags(tag: str) -> List[str]:
    """``tag`` and every older tag a node of that glibc (musl) level installs, newest first.

    pip's --platform takes a tag literally (a manylinux_2_34 target would refuse torch's manylinux_2_28
    wheels), unlike pip on the node itself, which accepts every older manylinux tag (PEP 600)."""
    legacy = {v: k for k, v in _LEGACY_MANYLINUX.items()}
    m = re.match(r"^(manylinux2014|manylinux2010|manylinux1)_(.+)$", tag)
    if m:
        tag = f"manylinux_2_{legacy[m.group(1)]}_{m.group(2)}"
    m = re.match(r"^manylinux_2_(\d+)_(.+)$", tag)
    if m:
        arch, out = m.group(2), []
        for minor in range(int(m.group(1)), 4, -1):
            out.append(f"manylinux_2_{minor}_{arch}")
            if minor in _LEGACY_MANYLINUX and (minor == 17 or arch in ("x86_64", "i686")):
                out.append(f"{_LEGACY_MANYLINUX[minor]}_{arch}")
        return out
    m = re.match(r"^musllinux_1_(\d+)_(.+)$", tag)
    if m:
        return [f"musllinux_1_{minor}_{m.group(2)}" for minor in range(int(m.group(1)), -1, -1)]
    return [tag]


def target_pip_args(target: Target) -> List[str]:
    args = ["--only-binary=:all:", "--python-version", target.python, "--implementation", "cp"]
    tags: List[str] = []
    for p in target.platforms:
        tags += [t for t in platform_tags(p) if t not in tags]
    for t in tags:
        args += ["--platform", t]
    return args


def index_pip_args(args: argparse.Namespace) -> List[str]:
    out = ["--index-url", args.index_url] if args.index_url else []
    for url in args.extra_index_url:
        out += ["--extra-index-url", url]
    for link in args.find_links:
        out += ["--find-links", link]
    return out + (["--no-index"] if args.no_index else [])


# ---------------------------------------------------------------------------------------------------
# The steps.

def build_own_wheel(build_dir: str, no_build_isolation: bool, verbose: bool) -> str:
    """Build sglang_ddtree's wheel into ``build_dir`` from a temporary copy of ``BUILD_FILES``; its path."""
    ours = pinned_versions()[0]
    with tempfile.TemporaryDirectory(prefix="ddtree-wheel-src-") as src:
        for name in BUILD_FILES:
            path = os.path.join(ROOT, name)
            if os.path.isdir(path):
                shutil.copytree(path, os.path.join(src, name),
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
            elif os.path.exists(path):
                shutil.copy2(path, src)
        run_pip(["wheel", "--no-deps", "--progress-bar", "off", "-w", build_dir, src]
                + (["--no-build-isolation"] if no_build_isolation else []), "building the sglang_ddtree wheel",
                verbose)
    wheel = os.path.join(build_dir, f"sglang_ddtree-{ours}-py3-none-any.whl")
    if not os.path.isfile(wheel):
        raise WheelhouseError(f"pip wheel did not produce {os.path.basename(wheel)} in {build_dir}")
    return wheel


class Dist(NamedTuple):
    version: str
    files: Tuple[str, ...]


def inventory(out: str) -> Dict[str, Dist]:
    """{canonical name: Dist} of the wheels in ``out``; raises on two versions of one project or a non-wheel."""
    found: Dict[str, Dist] = {}
    for f in sorted(os.listdir(out)):
        if f in (REQUIREMENTS, INSTALL) or f.startswith(".") or not os.path.isfile(os.path.join(out, f)):
            continue
        m = _WHEEL_NAME.match(f)
        if not m:
            raise WheelhouseError(f"{out} holds {f}, which is not a wheel: a wheelhouse holds wheels only; remove it")
        name, version = canonical(m.group("name")), m.group("version")
        if name in found and found[name].version != version:
            raise WheelhouseError(f"{out} holds {name} {found[name].version} and {version}: a wheelhouse holds one "
                                  "version of each project; empty it (or use a new --out) and run again")
        found[name] = Dist(version, found[name].files + (f,) if name in found else (f,))
    return found


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def torch_cuda_major(path: str) -> Optional[int]:
    """The CUDA major version a torch wheel is built for (its +cuXYZ tag, else its CUDA requirements)."""
    m = re.search(r"\+cu(\d+?)\d-", os.path.basename(path))
    if m:
        return int(m.group(1))
    with zipfile.ZipFile(path) as z:
        meta = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
        text = z.read(meta).decode("utf-8", "replace") if meta else ""
    m = re.search(r"^Requires-Dist: (?:cuda-toolkit\S*\s*==\s*|nvidia-\S+-cu)(\d+)", text, re.M)
    return int(m.group(1)) if m else None


def write_requirements(out: str, dists: Dict[str, Dist], header: str) -> None:
    lines = [f"# {header}", "# Written by scripts/build_wheelhouse.py: every wheel here, pinned, with its sha256 "
             "(pip refuses a damaged file). Install: INSTALL.txt."]
    for name, dist in sorted(dists.items()):
        hashes = [f"--hash=sha256:{_sha256(os.path.join(out, f))}" for f in dist.files]
        lines.append(" \\\n    ".join([f"{name}=={dist.version}"] + hashes))
    with open(os.path.join(out, REQUIREMENTS), "w") as f:
        f.write("\n".join(lines) + "\n")


def install_commands(out: str, python: str, no_sglang: bool) -> List[str]:
    """The offline install commands INSTALL.txt gives."""
    if no_sglang:
        return [f'WHEELHOUSE={out}',
                'PYTHON=/path/to/the/python/that/has/sglang   # e.g. python3 in upstream\'s image',
                '"$PYTHON" -m pip install --no-index --find-links "$WHEELHOUSE" --no-deps -r "$WHEELHOUSE/requirements.txt"',
                '"$PYTHON" -m sglang_ddtree doctor']
    return [f'WHEELHOUSE={out}',
            f'python{python} -m venv /opt/sglang-ddtree/venv',
            '/opt/sglang-ddtree/venv/bin/pip install --no-index --find-links "$WHEELHOUSE" -r "$WHEELHOUSE/requirements.txt"',
            '/opt/sglang-ddtree/venv/bin/python -m sglang_ddtree doctor']


def write_install(out: str, dists: Dict[str, Dist], target: Target, no_sglang: bool, sglang: str) -> None:
    size = sum(os.path.getsize(os.path.join(out, f)) for d in dists.values() for f in d.files)
    ours = pinned_versions()[0]
    arch = _PLATFORM_TAG.match(target.platforms[0]).group(1)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"sglang-ddtree {ours}: offline wheelhouse",
             f"Built {stamp} by scripts/build_wheelhouse.py for CPython {target.python} on "
             f"{', '.join(target.platforms)}: {_n(len(dists), 'project')}, {size / 1e6:.0f} MB.", ""]
    if no_sglang:
        lines += [f"It holds only sglang_ddtree {ours} (built with --no-sglang). Install it, without dependencies, "
                  f"into a Python that already has sglang {sglang} and its stack (torch 2.11.0 + CUDA 13, "
                  "sglang-kernel 0.4.5, flashinfer 0.6.14), e.g. upstream's lmsysorg/sglang:v0.5.16-cu130 image:"]
    else:
        key = [f"{n} {dists[n].version}" for n in ("sglang", "torch", "sglang-kernel", "flashinfer-python")
               if n in dists]
        lines += [f"It holds sglang_ddtree {ours}, {', '.join(key)} and everything they require. On the air-gapped "
                  f"node (Linux {arch}, CPython {target.python} with venv, an NVIDIA driver for CUDA "
                  f"{TORCH_CUDA_MAJOR}), once this directory is copied there:"]
    lines += [""] + [f"  {c}" for c in install_commands(out, target.python, no_sglang)] + [
        "", "Set WHEELHOUSE to where this directory is on that node. requirements.txt pins every wheel here with "
        "its sha256, so pip takes nothing else and refuses a file damaged on the way; the doctor checks that the "
        "node can serve DDTREE (deploy/README.md: the systemd unit)."]
    with open(os.path.join(out, INSTALL), "w") as f:
        f.write("\n".join(line if line.startswith("  ") else textwrap.fill(line, 100) for line in lines) + "\n")


def verify_offline(out: str, target: Target, no_deps: bool, verbose: bool) -> int:
    """Resolve requirements.txt from ``out`` alone for the target; the number of wheels it would install."""
    with tempfile.TemporaryDirectory(prefix="ddtree-wheelhouse-check-") as tmp:
        report = os.path.join(tmp, "report.json")
        run_pip(["install", "--dry-run", "--no-index", "--find-links", out, *target_pip_args(target),
                 "--target", os.path.join(tmp, "target"), "--report", report, "--progress-bar", "off",
                 "-r", os.path.join(out, REQUIREMENTS)] + (["--no-deps"] if no_deps else []),
                "the offline check", verbose, target, isolated=True)
        with open(report) as f:
            items = json.load(f)["install"]
    here = os.path.realpath(out)
    for item in items:
        url = item["download_info"]["url"]
        path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path) if url.startswith("file:") else url
        if not os.path.realpath(path).startswith(here + os.sep):
            raise WheelhouseError(f"the offline check took {item['metadata']['name']} from {url}, outside {out}")
    resolved = {canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in items}
    pinned = {n: d.version for n, d in inventory(out).items()}
    if resolved != pinned:
        diff = sorted(set(resolved.items()) ^ set(pinned.items()))
        raise WheelhouseError(f"the offline check resolved another set than requirements.txt pins: {diff[:6]}")
    return len(items)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    out = os.path.abspath(args.out)
    if os.path.exists(out) and not os.path.isdir(out):
        ap.error(f"--out {args.out} exists and is not a directory")
    if args.no_index and not args.find_links:
        ap.error("--no-index needs --find-links: with neither an index nor links there is nothing to download from")
    ours, sglang, _ = pinned_versions()
    try:
        check_pip()
        target = resolve_target(args)
        os.makedirs(out, exist_ok=True)
        runs = f" (pip runs in {target.pip_python})" if target.pip_python else ""
        say(f"target CPython {target.python} on {', '.join(target.platforms)}{runs}; wheelhouse {out}")
        with tempfile.TemporaryDirectory(prefix="ddtree-wheel-") as build_dir:
            say(f"[1/4] building the sglang_ddtree {ours} wheel (pip wheel --no-deps"
                f"{' --no-build-isolation' if args.no_build_isolation else ''})")
            wheel = build_own_wheel(build_dir, args.no_build_isolation, args.verbose)
            if args.no_sglang:
                say("[2/4] --no-sglang: the wheelhouse gets our wheel only (install it with --no-deps)")
                shutil.copy2(wheel, out)
            else:
                say(f"[2/4] downloading sglang=={sglang} and everything it requires (wheels only)")
                run_pip(["download", "--progress-bar", "off", "-d", out, *target_pip_args(target),
                         *index_pip_args(args), wheel, f"sglang=={sglang}"],
                        f"downloading sglang=={sglang}", args.verbose, target)
        dists = inventory(out)
        if "torch" in dists:
            major = torch_cuda_major(os.path.join(out, dists["torch"].files[0]))
            say(f"torch {dists['torch'].version}: CUDA {major if major else 'unknown'} build")
            if major != TORCH_CUDA_MAJOR:
                say(f"warning: sglang {sglang}'s sglang-kernel and flashinfer need torch's CUDA {TORCH_CUDA_MAJOR} "
                    f"build: empty {out} and pass --extra-index-url {PYTORCH_INDEX}")
        say(f"[3/4] writing {REQUIREMENTS} ({_n(len(dists), 'project')}, with sha256) and {INSTALL}")
        header = (f"sglang_ddtree {ours}" + ("" if args.no_sglang else f" with sglang {sglang}")
                  + f", for CPython {target.python} on {', '.join(target.platforms)}")
        write_requirements(out, dists, header)
        write_install(out, dists, target, args.no_sglang, sglang)
        say(f"[4/4] checking that {out} alone resolves {REQUIREMENTS} (pip install --dry-run --no-index"
            f"{' --no-deps' if args.no_sglang else ''}, pip's configuration off)")
        n = verify_offline(out, target, args.no_sglang, args.verbose)
    except WheelhouseError as e:
        print(f"build_wheelhouse: error: {e}", file=sys.stderr)
        return 1
    size = sum(os.path.getsize(os.path.join(out, f)) for d in dists.values() for f in d.files)
    say(f"done: {out}: {_n(len(dists), 'project')}, {size / 1e6:.0f} MB; the offline check resolved all {n}. "
        f"Install: {os.path.join(out, INSTALL)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
