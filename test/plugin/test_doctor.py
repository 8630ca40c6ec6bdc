"""``python -m sglang_ddtree doctor``: one line per check with a fix for each failure, exit code 0 only
when all required checks pass, and a clear failure (not a crash) on a machine without a GPU."""

import json
import os
import subprocess
import sys
from importlib import metadata

import pytest

from sglang_ddtree import doctor
from sglang_ddtree.version import SUPPORT_MATRIX


def _doctor(*args):
    return subprocess.run([sys.executable, "-m", "sglang_ddtree", "doctor", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def doctor_json():
    proc = _doctor("--json")
    return proc.returncode, json.loads(proc.stdout)


def test_reports_every_check_once(doctor_json):
    _, report = doctor_json
    names = [c["name"] for c in report["checks"]]
    assert names == ["plugin entry point", "sglang", "torch", "sgl-kernel", "flashinfer", "GPU",
                     "upstream symbols", "server runtime modules"]
    for check in report["checks"]:
        assert check["status"] in ("OK", "FAIL", "WARN")
        if check["status"] == "FAIL":
            assert check["fix"], f"{check['name']} failed without a fix"


def test_exit_code_matches_required_checks(doctor_json):
    code, report = doctor_json
    failed_required = [c for c in report["checks"] if c["status"] == "FAIL" and c["required"]]
    assert report["ok"] is (not failed_required)
    assert code == (0 if report["ok"] else 1)


def test_plugin_and_sglang_checks_pass_in_the_test_environment(doctor_json):
    _, report = doctor_json
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["plugin entry point"]["status"] == "OK"
    installed = metadata.version("sglang")
    assert by_name["sglang"]["status"] == "OK" and by_name["sglang"]["detail"].startswith(f"{installed} (supported: ")
    assert SUPPORT_MATRIX[installed].status in by_name["sglang"]["detail"]
    assert by_name["upstream symbols"]["status"] == "OK", by_name["upstream symbols"]["detail"]


def test_without_a_gpu_the_gpu_check_fails_clearly():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = _doctor()
    assert proc.returncode == 1
    gpu_lines = [line for line in proc.stdout.splitlines() if "] GPU:" in line]
    assert gpu_lines == ["[FAIL] GPU: no CUDA GPU visible to torch"]
    assert "fix: run on a machine with an NVIDIA GPU (Hopper sm_90 or Blackwell sm_100/sm_120)" in proc.stdout
    assert proc.stdout.strip().endswith("doctor: some required checks FAILED (see fix lines)")


def test_sglang_outside_the_range_fails_with_the_fix(monkeypatch):
    from sglang_ddtree import plugin

    monkeypatch.setattr(plugin, "installed_sglang_version", lambda: "0.9.0")
    check = doctor.check_sglang()
    assert check.status == "FAIL"
    assert check.detail == "0.9.0 is outside the supported range >=0.5.16,<0.5.24"
    assert "pip install 'sglang>=0.5.16,<0.5.24'" in check.fix


def test_a_release_in_the_range_but_not_in_the_matrix_is_a_warning(monkeypatch):
    from sglang_ddtree import plugin

    monkeypatch.setattr(plugin, "installed_sglang_version", lambda: "0.5.17.post1")
    check = doctor.check_sglang()
    assert check.status == "WARN" and not check.required
    assert "0.5.17.post1 is inside >=0.5.16,<0.5.24 but not in the support matrix" in check.detail
    assert check.fix == "prefer a listed release: pip install 'sglang==0.5.23'"


def test_missing_upstream_symbol_is_named(monkeypatch):
    from sglang_ddtree import compat

    monkeypatch.setattr(compat, "UPSTREAM_SYMBOLS", compat.UPSTREAM_SYMBOLS + (
        ("sglang.srt.server_args.NoSuchThing", "a test"),))
    check = doctor.check_upstream_symbols()
    assert check.status == "FAIL"
    assert "sglang.srt.server_args.NoSuchThing (a test): AttributeError" in check.detail


def test_cuda_mismatch_between_torch_and_sgl_kernel_is_reported(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    import importlib.util
    import types

    pkg = tmp_path / "sgl_kernel"
    pkg.mkdir()
    (pkg / "common_ops.so").write_bytes(b"\x7fELF....libcudart.so.12\x00")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: types.SimpleNamespace(
        submodule_search_locations=[str(pkg)]) if name == "sgl_kernel" else None)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    check = doctor.check_sgl_kernel()
    assert check.status == "FAIL"
    assert "links CUDA runtime [12] but torch is built for CUDA 13" in check.detail
    assert "same CUDA major" in check.fix


def test_a_crashing_check_is_a_failed_check(monkeypatch):
    def boom():
        raise KeyError("x")

    monkeypatch.setattr(doctor, "CHECKS", (boom,))
    [result] = doctor.run_checks()
    assert result.status == "FAIL" and "check crashed: KeyError" in result.detail


def test_a_module_the_server_imports_is_caught(monkeypatch, tmp_path):
    """jsonschema (imported by sglang's OpenAI chat serving module) was once missing while a hand-kept
    list of modules said OK: the check imports the server's own modules, so a stand-in that is absent
    the same way must fail it, naming the module and the pip fix."""
    (tmp_path / "jsonschema").mkdir()
    (tmp_path / "jsonschema" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'jsonschema'\", name='jsonschema')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p))
    check = doctor.check_runtime_modules()
    assert check.status == "FAIL"
    assert "sglang.srt.entrypoints.http_server: ModuleNotFoundError: No module named 'jsonschema'" in check.detail
    assert check.fix.startswith("pip install jsonschema (then run the doctor again")


def test_an_import_that_kills_the_interpreter_is_a_failed_check(monkeypatch, tmp_path):
    (tmp_path / "dies_on_import.py").write_text("import os, sys\nprint('dying', file=sys.stderr)\nos._exit(3)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    check = doctor.check_runtime_modules(modules=("json", "dies_on_import"))
    assert check.status == "FAIL"
    assert check.detail == "the import interpreter died (exit code 3): dying"


def test_the_check_passes_when_the_modules_import():
    check = doctor.check_runtime_modules(modules=("json", "sglang_ddtree.config"))
    assert (check.status, check.detail) == ("OK", "all 2 import in a fresh interpreter: json, sglang_ddtree.config")


@pytest.mark.parametrize("failure, fix", [
    (("x", "ModuleNotFoundError", "No module named 'zmq'", "zmq"), "pip install pyzmq"),
    (("x", "ModuleNotFoundError", "No module named 'PIL.Image'", "PIL.Image"), "pip install pillow"),
    (("x", "ModuleNotFoundError", "No module named 'jsonschema'", "jsonschema"), "pip install jsonschema"),
    (("sglang.srt.entrypoints.http_server", "RuntimeError",
      'Form data requires "python-multipart" to be installed. \nYou can install "python-multipart" with: \n\n'
      "pip install python-multipart", None), "pip install python-multipart"),
    (("soundfile", "OSError", "cannot load library 'libsndfile.so'", None),
     "install the libsndfile system library (apt-get install libsndfile1)"),
    (("x", "ModuleNotFoundError", "No module named 'sglang.srt.gone'", "sglang.srt.gone"),
     "reinstall sglang: its module sglang.srt.gone is missing"),
])
def test_each_failed_import_gets_its_fix(failure, fix):
    assert doctor._import_fix(*failure) == fix


@pytest.mark.parametrize("fa3_installed", [True, False])
def test_gpu_check_names_the_backends_and_a_missing_fa3_library(monkeypatch, fa3_installed):
    import torch

    from sglang_ddtree import backends, doctor

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    monkeypatch.setattr(backends, "fa3_library_installed", lambda: fa3_installed)
    monkeypatch.delenv("SGLANG_DDTREE_FA3_TREE_ATTENTION", raising=False)
    from sglang_ddtree.worker import fa3_tree

    check = doctor.check_gpu()
    assert check.status == "OK" and "triton, flashinfer, fa3" in check.detail
    assert ("FA3 library (flash_ops) is NOT installed" in check.detail) is (not fa3_installed)
    default = "fa3" if fa3_installed and fa3_tree.enabled() else "triton"
    assert f"with no --attention-backend DDTREE uses {default}" in check.detail
    from sglang_ddtree.compat import adapter

    if adapter().family == "0.5.16":  # either default backend is one auto's default covers
        assert "with no --speculative-ddtree-budget a dense target at tp 1 / page 1 gets 'auto' here" in check.detail
    else:
        assert (f"with no --speculative-ddtree-budget a dense target gets 64 here ('auto' is the default only at "
                f"--tp-size 1, --page-size 1, fa3 (DDTREE's fused tree attention) or triton, SGLang 0.5.16; here "
                f"SGLang release family {adapter().family})") in check.detail


@pytest.mark.parametrize("switch", ["0", "", "1"])
def test_gpu_check_says_which_fa3_tree_verify_runs(monkeypatch, switch):
    import torch

    from sglang_ddtree import backends, doctor

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    monkeypatch.setattr(backends, "fa3_library_installed", lambda: True)
    monkeypatch.setenv("SGLANG_DDTREE_FA3_TREE_ATTENTION", switch)
    detail = doctor.check_gpu().detail
    from sglang_ddtree.worker import fa3_tree

    on = switch == "1" or (switch == "" and fa3_tree.release_supported())  # unset: on where the release carries it
    want = ("DDTREE fused tree attention (SGLANG_DDTREE_FA3_TREE_ATTENTION=1)" if on else
            "upstream cascade (SGLANG_DDTREE_FA3_TREE_ATTENTION=0)")
    assert f"fa3 tree verify: {want}" in detail


@pytest.mark.parametrize("switch, fa3_tree, want", [
    ("", "1", "--page-size > 1: fa3 / triton / flashinfer with a fixed budget (GPU-verified); elsewhere refused "
              "(SGLANG_DDTREE_EXPERIMENTAL_PAGED=1 to try it, not yet verified on a GPU)"),
    ("", "0", "--page-size > 1: triton / flashinfer with a fixed budget (GPU-verified) (fa3 runs upstream's cascade "
              "here: refused); elsewhere refused (SGLANG_DDTREE_EXPERIMENTAL_PAGED=1 to try"),
    ("1", "0", "--page-size > 1: allowed, EXPERIMENTAL beyond the verified configurations "
               "(SGLANG_DDTREE_EXPERIMENTAL_PAGED=1)"),
    ("on", "1", "--page-size > 1: SGLANG_DDTREE_EXPERIMENTAL_PAGED='on': use 1"),
])
def test_gpu_check_says_whether_pages_above_1_are_taken(monkeypatch, switch, fa3_tree, want):
    import torch

    from sglang_ddtree import doctor
    from sglang_ddtree.worker import fa3_tree as fa3

    if fa3_tree == "1" and not fa3.release_supported():
        pytest.skip("this release cannot carry DDTREE's fused fa3 tree attention (the switch set to 1 is refused)")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA H200")
    monkeypatch.setenv("SGLANG_DDTREE_EXPERIMENTAL_PAGED", switch)
    monkeypatch.setenv("SGLANG_DDTREE_FA3_TREE_ATTENTION", fa3_tree)
    check = doctor.check_gpu()
    assert check.status == "OK" and want in check.detail, check.detail
