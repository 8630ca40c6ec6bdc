"""CPU: the environment knobs of the engine-level GPU tests (``_gpu_backend.py``): the backend and the
tensor-parallel size they run at, with one-line errors for bad values and a stated skip where GPUs are missing."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _gpu_backend as g  # noqa: E402


def test_backend_default_and_bad_value(monkeypatch):
    monkeypatch.delenv("DDTREE_TEST_BACKEND", raising=False)
    assert g.test_backend() == "triton"
    monkeypatch.setenv("DDTREE_TEST_BACKEND", "fa3")
    assert g.test_backend() == "fa3"
    monkeypatch.setenv("DDTREE_TEST_BACKEND", "trtllm_mha")
    with pytest.raises(ValueError, match="DDTREE_TEST_BACKEND='trtllm_mha'"):
        g.test_backend()


def test_tp_size_default_values_and_skip(monkeypatch):
    monkeypatch.delenv("DDTREE_TEST_TP", raising=False)
    assert g.test_tp_size() == 1 and g.tp_skip_reason() is None
    for bad in ("0", "-1", "two", "1.5"):
        monkeypatch.setenv("DDTREE_TEST_TP", bad)
        with pytest.raises(ValueError, match=f"DDTREE_TEST_TP='{bad}': use a positive number of GPUs"):
            g.test_tp_size()
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("DDTREE_TEST_TP", "2")
    assert g.test_tp_size() == 2 and g.tp_skip_reason() == "DDTREE_TEST_TP=2 needs 2 CUDA GPUs, 1 visible"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert g.tp_skip_reason() is None


def test_budget_default_values_and_bad_value(monkeypatch):
    monkeypatch.delenv("DDTREE_TEST_BUDGET", raising=False)
    assert g.test_budget() == 64
    for raw, want in (("15", 15), ("auto", "auto"), ("AUTO", "auto"), ("auto:31", "auto:31")):
        monkeypatch.setenv("DDTREE_TEST_BUDGET", raw)
        assert g.test_budget() == want, raw
    for bad in ("0", "2000", "fast", "auto:0", "-3"):
        monkeypatch.setenv("DDTREE_TEST_BUDGET", bad)
        with pytest.raises(ValueError, match=f"DDTREE_TEST_BUDGET='{bad}': --speculative-ddtree-budget"):
            g.test_budget()
