"""Triton kernels of the worker's round (``@triton.jit`` only; wrappers live in ``sglang_ddtree.worker``).

Importing this package imports Triton; the wrappers import it lazily, only on CUDA (or under
``TRITON_INTERPRET=1`` in tests).
"""
