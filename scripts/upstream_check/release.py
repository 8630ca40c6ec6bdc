"""Fetching a release's wheel (or sdist) with pip into a cache, unpacking its ``.py`` files and metadata, and
scanning it against the symbol list entries its release family has (``compat.applies``)."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from typing import Dict, Optional, Sequence, Tuple

from upstream_check.source import analyse, compat, counts

PINNED = ("torch", "sglang-kernel", "sgl-kernel", "flashinfer-python", "transformers")
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "sglang-ddtree", "upstream")


# ---- fetching and unpacking a release ---------------------------------------------------------------
def _cached(version: str, cache: str) -> Optional[str]:
    for pattern in (f"sglang-{version}-*.whl", f"sglang-{version}.tar.gz", f"sglang-{version}.zip"):
        hits = sorted(glob.glob(os.path.join(cache, pattern)))
        if hits:
            return hits[0]
    return None


# Where pip finds no wheel for this machine (SGLang ships per-Python linux wheels only, and no sdist
# since 0.5.10.post1), any other flavour will do: the .py files are the same.
_ATTEMPTS = (["--only-binary=:all:"],
             ["--only-binary=:all:", "--platform", "manylinux_2_34_x86_64", "--python-version", "3.11"],
             ["--no-binary=:all:"])


def fetch_release(version: str, cache: str) -> str:
    """Path of the release's wheel (or sdist) in ``cache``, downloaded with pip when absent."""
    os.makedirs(cache, exist_ok=True)
    errors = []
    for extra in _ATTEMPTS:
        if _cached(version, cache):
            break
        cmd = [sys.executable, "-m", "pip", "download", f"sglang=={version}", "--no-deps", *extra, "-d", cache,
               "--disable-pip-version-check", "-q"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        errors.append(f"{' '.join(extra)}: {proc.stderr.strip()[-600:]}")
    if not _cached(version, cache):
        raise RuntimeError(f"pip download sglang=={version} found nothing:\n" + "\n".join(errors))
    return _cached(version, cache)


def unpack(archive: str, dest: str) -> Tuple[str, str]:
    """Extract the ``.py`` files and the metadata of ``archive``; (source root, metadata text)."""
    metadata = ""
    if archive.endswith(".whl"):
        with zipfile.ZipFile(archive) as z:
            for name in z.namelist():
                if name.endswith(".py"):
                    z.extract(name, dest)
                elif re.fullmatch(r"[^/]+\.dist-info/METADATA", name):
                    metadata = z.read(name).decode("utf-8", "replace")
        return dest, metadata
    with tarfile.open(archive) as t:
        members = [m for m in t.getmembers() if m.isfile() and (
            m.name.endswith((".py", "/PKG-INFO", "/pyproject.toml")))]
        t.extractall(dest, members=members, filter="data")
    inits = sorted(glob.glob(os.path.join(dest, "**", "sglang", "__init__.py"), recursive=True), key=len)
    if not inits:
        raise RuntimeError(f"no sglang/__init__.py in {archive}")
    root = os.path.dirname(os.path.dirname(inits[0]))
    pkg_info = sorted(glob.glob(os.path.join(dest, "*", "PKG-INFO")))
    if pkg_info:
        metadata = open(pkg_info[0], encoding="utf-8").read()
    if "Requires-Dist" not in metadata:  # old sdists: the pins live in pyproject.toml only
        import tomllib
        for pyproject in sorted(glob.glob(os.path.join(dest, "**", "pyproject.toml"), recursive=True), key=len):
            deps = tomllib.load(open(pyproject, "rb")).get("project", {}).get("dependencies", [])
            metadata += "".join(f"Requires-Dist: {d}\n" for d in deps)
    return root, metadata


def read_pins(metadata: str) -> Dict[str, str]:
    """{package: requirement} for the packages in ``PINNED`` (unconditional Requires-Dist lines only)."""
    pins = {}
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        if "extra ==" in req:
            continue
        m = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)", req)
        name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
        if name in PINNED:
            pins[name] = m.group(3).split(";")[0].strip().strip("()") or "(any)"
    return pins


def scan_release(version: str, cache: str, symbols: Sequence, workdir: str,
                 baseline_root: Optional[str] = None) -> Tuple[dict, str]:
    """(report of one release, the root of its unpacked source under ``workdir``)."""
    archive = fetch_release(version, cache)
    root, metadata = unpack(archive, os.path.join(workdir, version))
    symbols = [sym for sym in symbols if compat.applies(sym, version)]  # another family's entries: not expected
    results = analyse(root, symbols, baseline_root, packages=["sglang"])
    return {"archive": os.path.basename(archive), "pins": read_pins(metadata), "counts": counts(results),
            "symbols": results}, root
