"""The CPU suite of a commit against a release (``check_upstream --run-suite``): the throw-away environment,
pytest's counts, each failure from the junit XML, and the failures grouped by cause (``CAUSES``)."""

from __future__ import annotations

import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import zipfile
from typing import Dict, List, Optional, Sequence, Tuple

from upstream_check.release import PINNED, fetch_release, unpack
from upstream_check.source import REPO

# ---- the CPU suite against a release (--run-suite) ------------------------------------------------
# A throw-away venv under /tmp: its own site-packages holds the release's sglang wheel (--no-deps) and
# our wheel, built from a `git archive` of HEAD; a .pth line puts the base venv's site-packages (torch,
# transformers, pytest, ...) AFTER it, so the release shadows the base's sglang and everything else is
# the base's, whatever the release pins. The base venv is read, never written.
SUITE_PYTEST = ("-m", "not gpu", "-q", "-rfE", "-p", "no:cacheprovider")
_SUMMARY_WORDS = ("failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "error", "errors",
                  "warning", "warnings")
# Causes we know, matched (re.search) against a failure's error lines and traceback: (name, regex, what).
# Filled from the tracebacks of the recorded runs; anything unmatched is grouped by its error line.
CAUSES: Tuple[Tuple[str, str, str], ...] = (
    ("0.5.20+: ServerArgs is a msgspec struct", r"readonly attribute",
     "server_args.py's DDTreeServerArgs (a @dataclass subclass of ServerArgs) fails at import (dataclasses sets "
     "__match_args__ on the struct): register() raises, so DDTREE, its flags and its hooks are absent"),
    ("compat entries that do not resolve", r"do not resolve|test_installed_sglang_reads_all_ok|"
     r"test_the_doctor_leaves_only_sgl_kernel_unchecked",
     "compat.py's symbol list against the installed release (the static scan's missing / moved entries)"),
    ("cascade: DDTREE not registered (after the msgspec ServerArgs break)",
     r"Unknown speculative algorithm name: (DDTREE|ddtree)|Unexpected keyword argument 'speculative_ddtree|"
     r"has no attribute 'speculative_ddtree|speculative-ddtree|DID NOT RAISE (SystemExit|ValueError)|"
     r"usage: sglang serve|SystemExit: 2|test_scheduler_sees_the_hook_after_plugin_loading",
     "flags, validation and the scheduler hook that register() would have installed"),
    ("0.5.17+: runtime context, 'spec' namespace", r"config namespace 'spec' not published",
     "upstream's SchedulerMetricsReporter.report_decode_stats / request meta info read get_spec(); "
     "test/worker/test_observability.py's stand-in scheduler publishes no ServerArgs (through worker/metrics.py)"),
    ("0.5.17+: runtime context in a CPU check that publishes its own ServerArgs",
     r"declared NS\('\w+'\) but absent from the published ServerArgs|config namespace 'parallel' not published",
     "test/reference/upstream_dflash_check.py and scripts/make_hybrid_fixture.py --check published a partial "
     "ServerArgs (0.5.17: projected fields absent) / no 'parallel' namespace before initialize_model_parallel "
     "(0.5.23); both publish upstream's own default ServerArgs first since c38b063 / 5ecae95"),
    ("by 0.5.23: SchedulerMetricsReporter.spec_num_correct_drafts gone", r"spec_num_correct_drafts",
     "worker/metrics.py's report_decode_stats wrapper reads it (upstream: num_correct_drafts -> num_generated_tokens)"),
    ("0.5.18+: upstream DFLASH request refusals gone", r"'NoneType' object has no attribute 'startswith'",
     "dflash_utils.validate_dflash_request now refuses only return_hidden_states with overlap; the tests expect "
     "upstream's DFLASH logprob refusal that worker/request_checks.py passes through"),
    ("by 0.5.23: trtllm_mha_page_table moved", r"No module named 'sglang\.kernels\.ops\.kvcache\.trtllm_mha_page_table",
     "worker/fa3_tree.py imports sglang.kernels.ops.kvcache.trtllm_mha_page_table; now "
     "sglang.kernels.ops.attention.trtllm_mha_page_table"),
    ("artefact: version gate lifted", r"test_supported_range_is_stated_once|"
     r"test_unsupported_sglang_version_is_a_clear_runtime_error|test_sglang_outside_the_range_fails_with_the_fix",
     "tests of version.py's range itself, which --run-suite raises in its snapshot (not a break)"),
    ("artefact: wheel built in the snapshot", r"the wheel build must not write into the checkout",
     "--run-suite built our wheel inside its snapshot and left build/ there (fixed: it now removes it)"),
    ("not version-related: ancestor_bits_kernel has no offline-compile case",
     r"ancestor_bits_kernel: no specialisation listed|test_every_kernel_needs_a_listed_specialisation",
     "the tested commit's scripts/dev/compile_kernels_offline.py lacked fa3's fused kernels (added in d0049f1)"),
    ("not version-related: a wall-clock latency bound on a loaded machine", r"test_latency_percentiles_on_known_delays",
     "test/benchmark/test_bench_serving.py's fake-server p99 TTFT (a sleep of 99 ms + 12 ms slack) while other "
     "suites shared the 2 cores"),
    ("not version-related: a wall-clock ratio on a loaded machine", r"test_sweep_end_to_end",
     "test/benchmark/test_bench_serving.py's fake-server throughput ratio (1.26 vs > 1.3) while 4 suites shared 2 cores"),
)


def parse_pytest_summary(text: str) -> Dict[str, int]:
    """Counts from pytest's closing line ("== 2 failed, 10 passed, 1 skipped, 3 errors in 9.1s ==", or
    the -q form without the bars): {"failed": 2, "passed": 10, "skipped": 1, "error": 3}; {} when the
    output has none (pytest died before it). "errors" / "warnings" are counted as "error" / "warning"."""
    for line in reversed(text.splitlines()):
        body = line.strip().strip("=").strip()
        m = re.fullmatch(r"(.*?)\s+in\s+[\d.]+s(?:\s+\([^)]*\))?", body)
        if not m:
            continue
        parts = [p.strip() for p in m.group(1).split(",")]
        found = [re.fullmatch(r"(\d+)\s+(\w+)", p) for p in parts]
        if parts and all(f and f.group(2) in _SUMMARY_WORDS for f in found):
            out: Dict[str, int] = {}
            for f in found:
                word = f.group(2).rstrip("s") if f.group(2) in ("errors", "warnings") else f.group(2)
                out[word] = out.get(word, 0) + int(f.group(1))
            return out
        if body.startswith("no tests ran"):
            return {}
    return {}


def _error_lines(text: str) -> List[str]:
    """The ``E   `` lines of a pytest traceback, without the prefix."""
    return [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ") or ln == "E"]


def _deepest_frame(text: str, package: str) -> Optional[str]:
    """``package/sub/mod.py:LINE`` of the last traceback frame inside ``package`` (a site-packages or a
    checkout path; pytest's ``path.py:LINE`` or Python's ``File "path.py", line LINE``), or None."""
    hits = re.findall(rf"(?:^|[/\s\"]){re.escape(package)}/([\w/]+\.py)(?::(\d+)|\", line (\d+))", text, re.M)
    return f"{package}/{hits[-1][0]}:{hits[-1][1] or hits[-1][2]}" if hits else None


def parse_junit(xml_text: str, head_lines: int = 12) -> List[dict]:
    """One entry per failed / errored test case of a ``--junitxml`` report (``-o junit_family=xunit1``,
    which records the file): test id, outcome, pytest's message, the error lines (first ``head_lines``),
    and the deepest frame in sglang_ddtree and in sglang."""
    import xml.etree.ElementTree as ET

    out = []
    for case in ET.fromstring(xml_text).iter("testcase"):
        for outcome in ("failure", "error"):
            el = case.find(outcome)
            if el is None:
                continue
            text = el.text or ""
            classname, name = case.get("classname", ""), case.get("name", "")
            path = case.get("file") or classname.replace(".", "/") + ".py"
            cls = classname.rpartition(".")[2]
            test_id = f"{path}::{cls}::{name}" if cls and cls[0].isupper() else f"{path}::{name}"
            errors = _error_lines(text)
            message = (el.get("message") or "").strip().splitlines()[0][:300] if el.get("message") else ""
            out.append({"test": test_id, "outcome": "failed" if outcome == "failure" else "error",
                        "message": message, "root_error": root_error(text, message),
                        "error_lines": errors[:head_lines] or text.strip().splitlines()[-head_lines:],
                        "ours": _deepest_frame(text, "sglang_ddtree"), "upstream": _deepest_frame(text, "sglang")})
    return out


_EXC_LINE = re.compile(r"^(?:E\s)?\s*(?:\[rank\d+\]:\s*)?((?:\w+\.)*\w*(?:Error|Exception|Exit)\b(?::.*)?)$", re.M)


def root_error(text: str, message: str = "") -> str:
    """The exception a failure comes down to: the last exception line of its traceback that is not an
    AssertionError (a test that asserts on a subprocess's stderr shows the child's error there), else
    its first AssertionError line, else pytest's message."""
    found = [m.strip() for m in _EXC_LINE.findall(text)]
    others = [ln for ln in found if not ln.startswith("AssertionError")]
    return (others[-1] if others else found[0] if found else message or "")[:300]


def _error_key(failure: dict) -> str:
    """What a failure says, with its numbers, addresses and /tmp paths blurred: one cause, one key."""
    line = failure.get("root_error") or failure["message"] or (failure["error_lines"] or [""])[-1]
    return re.sub(r"0x[0-9a-f]+|\d+", "N", re.sub(r"/tmp/\S+?/site-packages/", "", line))[:200]


def classify(failures: Sequence[dict], causes: Sequence[Tuple[str, str, str]] = CAUSES) -> List[dict]:
    """Group ``failures`` (``parse_junit`` entries): by the first of ``causes`` whose regex matches a
    failure's message, error lines or frames, else by its blurred error line. Largest group first; each
    lists its tests and our modules (the deepest sglang_ddtree frame) it goes through."""
    groups: Dict[str, dict] = {}
    for f in failures:
        hay = "\n".join([f["test"], f["message"], f.get("root_error", ""), *f["error_lines"], f["ours"] or "",
                         f["upstream"] or ""])
        cause = next(((n, what) for n, rx, what in causes if re.search(rx, hay)), None)
        key = cause[0] if cause else "unclassified: " + _error_key(f)
        g = groups.setdefault(key, {"cause": key, "what": cause[1] if cause else "", "count": 0,
                                    "our_modules": [], "upstream_frames": [], "tests": [], "example": f["error_lines"][:6]})
        g["count"] += 1
        g["tests"].append(f["test"])
        mod = (f["ours"] or "").rpartition(":")[0]
        if mod and mod not in g["our_modules"]:
            g["our_modules"].append(mod)
        up = (f["upstream"] or "").rpartition(":")[0]
        if up and up not in g["upstream_frames"]:
            g["upstream_frames"].append(up)
    return sorted(groups.values(), key=lambda g: -g["count"])


def lift_version_gate(version_py: str, version: str) -> str:
    """``version.py``'s text with SUPPORTED_SGLANG_MAX_EXCLUSIVE raised just past ``version`` (the next
    patch release: 0.5.17.post1 -> 0.5.18), so that the plugin loads on that release and the suite shows what
    breaks past the gate; unchanged when ``version`` is already inside the range (a supported release)."""
    from packaging.version import Version

    current = re.search(r'^SUPPORTED_SGLANG_MAX_EXCLUSIVE = "([^"]+)"', version_py, re.M)
    assert current, "version.py has no SUPPORTED_SGLANG_MAX_EXCLUSIVE line"
    if Version(version) < Version(current.group(1)):
        return version_py
    release = list(Version(version).release) + [0] * 3
    nxt = f"{release[0]}.{release[1]}.{release[2] + 1}"
    new, n = re.subn(r'^SUPPORTED_SGLANG_MAX_EXCLUSIVE = "[^"]+"', f'SUPPORTED_SGLANG_MAX_EXCLUSIVE = "{nxt}"',
                     version_py, flags=re.M)
    assert n == 1, "version.py has no SUPPORTED_SGLANG_MAX_EXCLUSIVE line"
    return new


def requirements(metadata: str) -> List[str]:
    """The unconditional Requires-Dist requirements of a release's METADATA."""
    return [ln.split(":", 1)[1].strip() for ln in metadata.splitlines()
            if ln.startswith("Requires-Dist:") and "extra ==" not in ln]


def compare_requirements(reqs: Sequence[str], installed: Dict[str, Optional[str]]) -> List[dict]:
    """{name, wants, have, ok} for each requirement against ``installed`` ({normalised name: version or
    None}); ``ok`` is None where the version cannot be compared."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    rows = []
    for text in reqs:
        try:
            req = Requirement(text)
        except Exception:
            continue
        if req.marker is not None and not req.marker.evaluate():
            continue
        name = canonicalize_name(req.name)
        have = installed.get(name)
        try:
            ok = have is not None and req.specifier.contains(have, prereleases=True)
        except Exception:
            ok = None
        rows.append({"name": name, "wants": str(req.specifier) or "(any)", "have": have, "ok": ok})
    return rows


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return proc


_PROBE = r"""
import importlib.metadata as md, json, sys
names = json.loads(sys.argv[1])
have = {}
for n in names:
    try:
        have[n] = md.version(n)
    except md.PackageNotFoundError:
        have[n] = None
import importlib.util as iu
files = {m: (iu.find_spec(m) or type("", (), {"origin": None})).origin for m in ("sglang", "sglang_ddtree", "torch")}
print(json.dumps({"installed": have, "files": files, "python": sys.version.split()[0]}))
"""


def make_suite_env(version: str, archive: str, base_python: str, workdir: str, lift_gate: bool,
                   rev: str = "HEAD") -> dict:
    """Build the throw-away venv and the source snapshot under ``workdir``; facts about it (commit,
    paths, the gate)."""
    src, venv, dist = (os.path.join(workdir, d) for d in ("src", "venv", "dist"))
    os.makedirs(src)
    commit = _run(["git", "-C", REPO, "rev-parse", "--verify", f"{rev}^{{commit}}"]).stdout.strip()
    tar = subprocess.Popen(["git", "-C", REPO, "archive", "--format=tar", commit], stdout=subprocess.PIPE)
    _run(["tar", "-x", "-C", src], stdin=tar.stdout)
    assert tar.wait() == 0, "git archive failed"
    gate = "kept (the plugin refuses this release)"
    if lift_gate:
        vpy = os.path.join(src, "python", "sglang_ddtree", "version.py")
        before = open(vpy).read()
        text = lift_version_gate(before, version)
        open(vpy, "w").write(text)
        line = re.search(r"^SUPPORTED_SGLANG_MAX_EXCLUSIVE = .*$", text, re.M).group()
        gate = (f"lifted in the snapshot: {line}" if text != before
                else f"kept (a supported release): {line}")
    base = json.loads(_run([base_python, "-c", "import sys, sysconfig, json; print(json.dumps([sys._base_executable, "
                            "sysconfig.get_paths()['purelib'], sysconfig.get_paths()['platlib']]))"]).stdout)
    _run([base[0], "-m", "venv", "--without-pip", venv])
    site = json.loads(_run([os.path.join(venv, "bin", "python"), "-c", "import sysconfig, json; "
                            "print(json.dumps(sysconfig.get_paths()['purelib']))"]).stdout)
    # A hard-linked copy of the base's site-packages: a reinstall in the base venv while the suite runs
    # (others use it) replaces files and so does not reach this copy. Its .pth files run (the torchvision
    # shim), except an editable install's, which would put a live checkout on the path.
    layers = []
    for i, path in enumerate(dict.fromkeys(base[1:])):
        copy = os.path.join(workdir, f"base-site{i}")
        try:
            _run(["cp", "-al", path, copy])
            for pth in glob.glob(os.path.join(copy, "__editable__*.pth")):
                os.remove(pth)
            layers.append(copy)
        except RuntimeError:  # another file system: the base itself, live
            layers.append(path)
    with open(os.path.join(site, "_base_site.pth"), "w") as f:
        f.write("".join(f"import site; site.addsitedir({p!r})\n" for p in layers))
    _run([base_python, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", dist, src])
    shutil.rmtree(os.path.join(src, "build"), ignore_errors=True)  # as setup_env.sh: the suite checks the
    for egg in glob.glob(os.path.join(src, "python", "*.egg-info")):  # checkout holds no build output
        shutil.rmtree(egg, ignore_errors=True)
    ours = glob.glob(os.path.join(dist, "sglang_ddtree-*.whl"))
    _run([base_python, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--disable-pip-version-check",
          "--target", site, archive, *ours])
    return {"workdir": workdir, "src": src, "venv": venv, "site": site, "commit": commit, "version_gate": gate,
            "base_python": base_python, "base_site": base[1], "layers": layers, "our_wheel": os.path.basename(ours[0])}


def run_suite(version: str, cache: str, base_python: str, lift_gate: bool = True, keep: bool = False,
              pytest_args: Sequence[str] = (), rev: str = "HEAD") -> dict:
    """The CPU suite of HEAD against ``version`` (see this section's comment): the environment, the
    release's pins against what that environment has, pytest's counts, each failure, and their causes."""
    archive = fetch_release(version, cache)
    with tempfile.TemporaryDirectory(prefix="meta-") as tmp:
        metadata = unpack_metadata(archive, tmp)
    workdir = tempfile.mkdtemp(prefix=f"sglang-suite-{version}-", dir="/tmp")
    try:
        env_facts = make_suite_env(version, archive, base_python, workdir, lift_gate, rev)
        py = os.path.join(env_facts["venv"], "bin", "python")
        reqs = requirements(metadata)
        from packaging.requirements import Requirement
        from packaging.utils import canonicalize_name
        names = sorted({canonicalize_name(Requirement(r).name) for r in reqs} | {"sglang", "sglang-ddtree"})
        probe = json.loads(_run([py, "-c", _PROBE, json.dumps(names)], cwd=workdir).stdout)
        rows = compare_requirements(reqs, probe["installed"])
        pins = {r["name"]: r for r in rows if r["name"] in PINNED}
        junit = os.path.join(workdir, "junit.xml")
        cmd = [py, "-m", "pytest", "test", *SUITE_PYTEST, f"--junitxml={junit}", "-o", "junit_family=xunit1",
               *pytest_args]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env.update(VIRTUAL_ENV=env_facts["venv"], PATH=os.path.join(env_facts["venv"], "bin") + os.pathsep + env["PATH"])
        t0 = time.time()
        with open(os.path.join(workdir, "pytest.log"), "w") as log:
            rc = subprocess.run(cmd, cwd=env_facts["src"], stdout=log, stderr=subprocess.STDOUT, env=env).returncode
        wall = time.time() - t0
        text = open(os.path.join(workdir, "pytest.log"), encoding="utf-8", errors="replace").read()
        failures = parse_junit(open(junit, encoding="utf-8").read()) if os.path.exists(junit) else []
        result = {
            "sglang": version, "archive": os.path.basename(archive), "date": datetime.date.today().isoformat(),
            "commit": env_facts["commit"], "version_gate": env_facts["version_gate"],
            "environment": {"how": "python -m venv --without-pip under /tmp; its site-packages: the release's wheel "
                                   "and ours (pip install --no-deps --target); after it, by a .pth line, a hard-linked "
                                   "copy of the base venv's site-packages (less its editable-install .pth) for every "
                                   "other package",
                            "base_python": base_python, "base_site": env_facts["base_site"],
                            "base_layers": env_facts["layers"],
                            "python": probe["python"], "imported_from": probe["files"],
                            "our_wheel": env_facts["our_wheel"]},
            "pins": pins,
            "pin_mismatches": sorted(n for n, r in pins.items() if not r["ok"]),
            "requirements_absent": sorted(r["name"] for r in rows if r["have"] is None and r["name"] not in PINNED),
            "requirements_other_version": [r for r in rows if r["have"] is not None and not r["ok"]
                                           and r["name"] not in PINNED],
            "pytest": {"command": " ".join(["python", "-m", "pytest", "test", *SUITE_PYTEST, *pytest_args]),
                       "rc": rc, "wall_s": round(wall, 1), "counts": parse_pytest_summary(text),
                       "closing_line": next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")},
            "failure_classes": classify(failures),
            "failures": failures,
        }
        if not failures and rc not in (0, 5):
            result["pytest"]["log_tail"] = text.splitlines()[-40:]
        return result
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def unpack_metadata(archive: str, tmp: str) -> str:
    """The METADATA text of a release archive (a wheel's dist-info, or what ``unpack`` reads)."""
    if archive.endswith(".whl"):
        with zipfile.ZipFile(archive) as z:
            name = next(n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
            return z.read(name).decode("utf-8", "replace")
    return unpack(archive, tmp)[1]


def suite_summary(result: dict) -> str:
    c, p = result["pytest"]["counts"], result["pins"]
    pins = ", ".join(f"{n} wants {r['wants']} has {r['have']}" + ("" if r["ok"] else " (MISMATCH)")
                     for n, r in sorted(p.items()))
    lines = [f"{result['sglang']}  suite rc {result['pytest']['rc']}  "
             + "  ".join(f"{k} {v}" for k, v in c.items()) + f"  [{pins}]"]
    for g in result["failure_classes"]:
        lines.append(f"    {g['count']:>4}  {g['cause']}  ({', '.join(g['our_modules'][:4]) or 'no frame of ours'})")
    return "\n".join(lines)
