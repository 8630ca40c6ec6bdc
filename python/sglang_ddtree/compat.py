"""Upstream SGLang symbols sglang-ddtree relies on, in one list the doctor and the tests resolve.

When the pinned SGLang is bumped, ``python -m sglang_ddtree doctor`` (and ``test/test_compat.py``)
names every symbol that moved, before anything fails at serving time. Modules that hook or subclass
an upstream symbol add it here.
"""

from __future__ import annotations

import importlib
from typing import List, Tuple

from sglang_ddtree.worker import hooks as _worker_hooks

# (dotted path, what we use it for)
UPSTREAM_SYMBOLS: Tuple[Tuple[str, str], ...] = (
    ("sglang.srt.plugins.load_plugins", "plugin loading"),
    ("sglang.srt.plugins.hook_registry.HookRegistry", "installing hooks"),
    ("sglang.srt.speculative.spec_info.SpeculativeAlgorithm.register", "registering DDTREE"),
    ("sglang.srt.speculative.spec_registry.CustomSpecAlgo", "base class of DDTreeSpecAlgo"),
    ("sglang.srt.speculative.spec_registry.get_spec", "idempotent registration"),
    ("sglang.srt.server_args.ServerArgs", "REPLACE hook adding the DDTREE flags"),
    ("sglang.srt.server_args.prepare_server_args", "CLI parsing of the flags"),
    ("sglang.srt.entrypoints.engine.Engine.server_args_class", "REPLACE hook for sglang.Engine kwargs"),
    ("sglang.srt.arg_groups.arg_utils.Arg", "flag declarations"),
    ("sglang.srt.arg_groups.speculative_hook._handle_dflash", "drafter block size / draft backend"),
    ("sglang.srt.arg_groups.overrides.resolved_view", "reading resolved attention backends"),
    ("sglang.srt.arg_groups.overrides.attention_backends_of", "reading resolved attention backends"),
    ("sglang.srt.managers.overlap_utils.FutureMap", "DDTreeSpecAlgo.create_future_map"),
    ("sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2", "base class of the DDTREE worker"),
    ("sglang.srt.utils.async_probe.sanitize_nan_logits", "verify logits check (worker.sampling)"),
    ("sglang.srt.sampling.penaltylib.repetition_penalty.apply_scaling_penalties", "penalties at T > 0 (worker.sampling)"),
    ("sglang.srt.runtime_context.get_server_args", "per-request checks, accept thresholds at T > 0"),
) + tuple((target, "worker hook (sglang_ddtree.worker.hooks)") for target in _worker_hooks.HOOK_TARGETS)


def resolve(path: str):
    """Import ``path`` = ``module[.attr...]`` and return the object; raises ImportError/AttributeError."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError as e:
            if e.name is not None and not ".".join(parts[:split]).startswith(e.name):
                raise  # the module exists but one of ITS imports is missing
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"no importable module in {path!r}")


def missing_upstream_symbols() -> List[Tuple[str, str, str]]:
    """(path, purpose, error) for every upstream symbol that does not resolve in this environment."""
    missing = []
    for path, purpose in UPSTREAM_SYMBOLS:
        try:
            resolve(path)
        except Exception as e:  # report every failure kind: missing module, attribute, broken import
            missing.append((path, purpose, f"{type(e).__name__}: {e}"))
    return missing
