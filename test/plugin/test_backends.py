"""The attention backends DDTREE verifies trees with (``sglang_ddtree.backends``): the default it picks when
the user names none, the error texts, and how the doctor finds sgl_kernel's FA3 library without importing it."""

import sys

import pytest

from sglang_ddtree import backends


def test_default_backend_is_a_tested_one():
    assert backends.DEFAULT_TARGET_ATTENTION_BACKEND in backends.TESTED_TARGET_ATTENTION_BACKENDS
    assert backends.DEFAULT_TARGET_ATTENTION_BACKEND not in backends.UNSUPPORTED_TARGET_BACKENDS


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
