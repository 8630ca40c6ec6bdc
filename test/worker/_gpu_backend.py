"""The target attention backend of the engine-level GPU tests that run one backend at a time
(sampling, everyday features, observability): ``DDTREE_TEST_BACKEND`` = triton (default) | flashinfer | fa3,
e.g. ``DDTREE_TEST_BACKEND=fa3 python -m pytest -m gpu test/worker/test_sampling_gpu.py``; their tensor-parallel
size: ``DDTREE_TEST_TP`` = 1 (default) | N (N GPUs: the tests skip, saying so, where fewer are visible); the
everyday-features test's DDTREE budget: ``DDTREE_TEST_BUDGET`` = 64 (default) | N | auto | auto:N; and whether
fa3's kernel library is there (``fa3_status``, for the tests that cover every backend)."""

import os

BACKENDS = ("triton", "flashinfer", "fa3")


def test_backend() -> str:
    value = os.environ.get("DDTREE_TEST_BACKEND", "triton").strip() or "triton"
    if value not in BACKENDS:
        raise ValueError(f"DDTREE_TEST_BACKEND={value!r}: use one of {BACKENDS}")
    return value


test_backend.__test__ = False  # not a pytest test


def test_tp_size() -> int:
    value = os.environ.get("DDTREE_TEST_TP", "1").strip() or "1"
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"DDTREE_TEST_TP={value!r}: use a positive number of GPUs (the engines' --tp-size)")
    return int(value)


test_tp_size.__test__ = False


def test_budget():
    """``DDTREE_TEST_BUDGET``: the ``--speculative-ddtree-budget`` of the everyday-features test's DDTREE engines, an
    integer (default 64) or ``auto`` / ``auto:N``, checked as the server checks the flag."""
    from sglang_ddtree.config import DDTreeArgumentError, check_budget

    raw = os.environ.get("DDTREE_TEST_BUDGET", "64").strip() or "64"
    try:
        return check_budget(int(raw) if raw.isdigit() else raw, allow_auto=True)
    except DDTreeArgumentError as e:
        raise ValueError(f"DDTREE_TEST_BUDGET={raw!r}: {e}") from None


test_budget.__test__ = False


def tp_skip_reason(tp=None):
    """Why engines of tensor-parallel size ``tp`` (default: ``DDTREE_TEST_TP``) cannot run here (None: they can)."""
    name = f"tensor parallelism {tp}" if tp is not None else f"DDTREE_TEST_TP={test_tp_size()}"
    tp = test_tp_size() if tp is None else tp
    if tp == 1:
        return None
    import torch

    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return None if have >= tp else f"{name} needs {tp} CUDA GPUs, {have} visible"


def fa3_status():
    """(available, reason): fa3 needs sgl_kernel's separately staged FA3 library (``flash_ops``, 1.1 GB)."""
    try:
        import sgl_kernel.flash_ops  # noqa: F401
    except Exception as e:  # ImportError, or OSError from a missing / partial library
        return False, (f"fa3 not available here: sgl_kernel.flash_ops does not import ({type(e).__name__}: {e}); "
                       "stage the FA3 library first (shared/device/README.md, 'The fa3 backend')")
    return True, ""
