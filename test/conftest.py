"""Shared pytest set-up: the ``gpu`` marker skips cleanly on machines without CUDA."""

import os
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PY = os.path.join(_ROOT, "python")
try:  # prefer the installed wheel; fall back to the checkout (e.g. a quick run before `pip install`)
    import sglang_ddtree  # noqa: F401
except ImportError:
    sys.path.insert(0, _PY)

collect_ignore = ["_test_plugin"]  # the TEST-ONLY SGLang plugin package (test/worker/_test_plugin_env.py), not tests


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run with `pytest -m gpu` on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
