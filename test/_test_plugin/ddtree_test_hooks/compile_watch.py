"""TEST ONLY: how many Triton specialisations of the round's eager kernels this process has compiled.

``worker.warmup.warm_round_kernels`` compiles them at start-up; the compile watch (``DDTREE_TEST_COMPILE_LOG``,
``hooks.after_warm_compile_baseline`` / ``hooks.after_round_compile_check``) and ``test_warmup_gpu.py`` check
that no round compiles another. Pure: imports the kernels only when counting.
"""

from __future__ import annotations

import importlib
from typing import Dict

# name: (module, attribute) of each Triton JIT function a round launches outside CUDA graphs
KERNELS = {
    "build": ("sglang_ddtree.tree.kernels.build_tree", "ddtree_build_kernel"),
    "topology": ("sglang_ddtree.tree.kernels.topology", "ddtree_topology_kernel"),
    "commit": ("sglang_ddtree.worker.kernels.commit", "ddtree_accept_commit_kernel"),
    "bits": ("sglang_ddtree.worker.kernels.tree_attention", "ancestor_bits_kernel"),
    "draw": ("sglang_ddtree.worker.kernels.draw", "draw_rows_kernel"),
    "move_kv": ("sglang_ddtree.worker.kernels.kv_move", "move_kv_rows_kernel"),
    "slots": ("sglang.kernels.ops.speculative.cache_locs", "assign_extend_cache_locs"),
}


def variants(fn) -> int:
    """Compiled specialisations of a Triton JIT function over its devices (Triton 3.x keeps one kernel cache per
    device: ``device_caches[device][0]``); an autotuner's wrapped function is counted."""
    while not hasattr(fn, "device_caches") and hasattr(fn, "fn"):  # an autotuner (or heuristics) wrapper
        fn = fn.fn
    caches = getattr(fn, "device_caches", None)
    if caches is None:
        raise TypeError(f"{fn!r}: no Triton device_caches (another Triton than 3.x?)")
    return sum(len(entry[0]) for entry in caches.values())


def counts() -> Dict[str, int]:
    """{kernel name: compiled specialisations} for every kernel of ``KERNELS``."""
    return {name: variants(getattr(importlib.import_module(mod), attr)) for name, (mod, attr) in KERNELS.items()}


def grown(before: Dict[str, int], after: Dict[str, int]) -> Dict[str, list]:
    """{name: [before, after]} of the kernels whose count changed."""
    return {k: [before.get(k, 0), v] for k, v in after.items() if v != before.get(k, 0)}
