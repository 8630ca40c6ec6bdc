"""The target attention backend of the engine-level GPU tests that run one backend at a time
(sampling, everyday features, observability): ``DDTREE_TEST_BACKEND`` = triton (default) | flashinfer | fa3,
e.g. ``DDTREE_TEST_BACKEND=fa3 python -m pytest -m gpu test/worker/test_sampling_gpu.py``."""

import os

BACKENDS = ("triton", "flashinfer", "fa3")


def test_backend() -> str:
    value = os.environ.get("DDTREE_TEST_BACKEND", "triton").strip() or "triton"
    if value not in BACKENDS:
        raise ValueError(f"DDTREE_TEST_BACKEND={value!r}: use one of {BACKENDS}")
    return value


test_backend.__test__ = False  # not a pytest test
