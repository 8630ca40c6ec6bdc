"""Offline compile of our Triton kernels on CPU (``scripts/dev/compile_kernels_offline.py``), no GPU needed.

One small specialisation of every kernel compiles for sm_90 with Triton's bundled ptxas, and every
``@triton.jit`` function of the kernel packages is reached by a listed launch (directly or as a helper of
a launched kernel), so a new kernel without a listed specialisation fails here. Both run in one child
process without TRITON_INTERPRET (under the interpreter ``triton.jit`` gives no compilable kernels) and
without the recorders' patches reaching this process. Skipped only when Triton's ptxas is missing.
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT_DIR = os.path.join(ROOT, "scripts", "dev")  # compile_kernels_offline.py
ARCH = 90  # H100 / H200 (the bundled ptxas 12.x; sm_100 / sm_120 take ptxas-blackwell)


def _ptxas_missing():
    try:
        from triton.backends.nvidia.compiler import get_ptxas
    except ImportError as e:
        return f"Triton's NVIDIA backend is not importable ({e}), so there is no bundled ptxas"
    try:
        get_ptxas(ARCH)
    except RuntimeError as e:
        return f"no ptxas for sm_{ARCH}: {e}"
    return None


_MISSING = _ptxas_missing()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=str(_MISSING))


_CHILD = r"""
import json
import sys

sys.path.insert(0, {script_dir!r})
import torch
import triton
import triton.language as tl

import compile_kernels_offline as c
from sglang_ddtree.tree import _common, build

rc = c.main(["--arch", "{arch}", "--smoke", "--jobs", "{jobs}", "--out", {smoke!r}])
kernels = c.discover_kernels()
launches = c.record_launches(kernels, c.cases(smoke=True))
facts = {{
    "rc": rc,
    "num_kernels": len(kernels),
    "problems": c.coverage_problems(kernels, launches),
    "recorder_left": [k for k, f in kernels.items() if "run" in vars(f)],
    "use_triton_restored": build.use_triton is _common.use_triton
    and _common.use_triton("x", torch.device("cpu"), "auto") is False,
}}


@triton.jit
def _new_helper(x):
    return x + 1


@triton.jit
def new_kernel(x_ptr):
    tl.store(x_ptr, _new_helper(tl.load(x_ptr)))


kernels.update({{"__main__:new_kernel": new_kernel, "__main__:_new_helper": _new_helper}})
facts["problems_with_new_kernel"] = c.coverage_problems(kernels, launches)
facts["problems_once_launched"] = c.coverage_problems(kernels, launches + [c.Launch(new_kernel, (), {{}}, "t")])
with open({facts!r}, "w") as f:
    json.dump(facts, f)
"""


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    """One child process (imports cost ~10 s): the smoke compile, then the coverage checks."""
    tmp = tmp_path_factory.mktemp("compile_offline")
    smoke, facts, script = tmp / "smoke.json", tmp / "facts.json", tmp / "child.py"
    script.write_text(_CHILD.format(script_dir=SCRIPT_DIR, arch=ARCH, jobs=min(4, os.cpu_count() or 1),
                                    smoke=str(smoke), facts=str(facts)))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(ROOT, "python"), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    log = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0, log
    return json.loads(smoke.read_text()), json.loads(facts.read_text()), log


def test_one_specialisation_of_every_kernel_compiles_for_sm90(child):
    doc, facts, log = child
    ptxas = doc["ptxas"][f"sm_{ARCH}"]
    if not ptxas["available"]:
        pytest.skip(f"ptxas cannot assemble for sm_{ARCH}: {ptxas['reason']}")
    assert facts["rc"] == 0, log
    assert ptxas["gpu_name"] == "sm_90a"
    rows = doc["results"]
    launched = {r["kernel"] for r in rows}
    helpers = set().union(*doc["calls"].values()) if doc["calls"] else set()
    assert launched | helpers == set(doc["kernels"]), log
    assert len(launched) >= 8, launched  # build, topology, accept, commit, kv move, top-K x 2, draw
    for r in rows:
        assert r["ok"], r["error"]
        assert r["regs"] > 0 and r["spill_stores"] is not None and r["shared"] is not None, r
        assert r["num_warps"] in (4, 8) and r["ptx"].endswith("sm_90a"), r


def test_every_kernel_needs_a_listed_specialisation(child):
    doc, facts, _ = child
    assert facts["num_kernels"] == len(doc["kernels"]) > 0
    assert facts["problems"] == [] == doc["coverage_problems"]
    assert facts["recorder_left"] == [] and facts["use_triton_restored"]
    # a new kernel without a case fails, with the helper only it calls; launched, both are covered
    assert [p.split(":")[1] for p in facts["problems_with_new_kernel"]] == ["_new_helper", "new_kernel"]
    assert facts["problems_once_launched"] == []
