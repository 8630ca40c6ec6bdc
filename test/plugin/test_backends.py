"""The attention backends DDTREE verifies trees with (``sglang_ddtree.backends``): the default it picks
when the user names none, per GPU, and how it finds sgl_kernel's FA3 library without importing it."""

import sys

import pytest

from sglang_ddtree import backends


@pytest.mark.parametrize("capability, fa3, want", [
    ((9, 0), True, "fa3"),  # Hopper with the FA3 library: SGLang's own Hopper default
    ((9, 0), False, "triton"),  # Hopper without it (a slim install)
    ((10, 0), True, "triton"),  # Blackwell: fa3 is a Hopper kernel library
    ((12, 0), True, "triton"),
    ((8, 0), True, "triton"),
])
def test_default_backend_per_gpu(capability, fa3, want):
    backend, why = backends.default_target_attention_backend(capability, fa3_installed=fa3)
    assert backend == want and backend in backends.TESTED_TARGET_ATTENTION_BACKENDS and why


def test_default_backend_without_a_gpu(monkeypatch):
    monkeypatch.setattr(backends, "cuda_capability", lambda: None)
    assert backends.default_target_attention_backend() == ("triton", "no CUDA GPU visible: fa3 is a Hopper kernel library")


def test_fa3_library_found_on_disk_without_import(tmp_path, monkeypatch):
    pkg = tmp_path / "sgl_kernel"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "sgl_kernel", raising=False)
    assert not backends.fa3_library_installed()
    (pkg / "flash_ops.abi3.so").write_bytes(b"")
    assert backends.fa3_library_installed()
    assert "sgl_kernel" not in sys.modules


def test_error_text_lists_every_tested_backend():
    assert backends.tested_backends_text() == "triton, flashinfer or fa3"
    assert "no custom (tree) attention mask" in backends.refusal_reason("trtllm_mha")
    assert "untested" in backends.refusal_reason("torch_native")
