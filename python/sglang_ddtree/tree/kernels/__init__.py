"""Triton kernels of the tree ops (``@triton.jit`` only; wrappers live in ``sglang_ddtree.tree``).

Importing this package imports Triton; the public API imports it lazily, only on the Triton path.
"""
