"""SGLang plugin entry point (group ``sglang.srt.plugins``, name ``ddtree``).

SGLang's ``load_plugins()`` calls :func:`register` in every process it starts (launcher, engine,
each scheduler subprocess), then applies the registered hooks. ``register`` is thin and idempotent:
it checks the installed SGLang against the supported range, registers the ``DDTREE`` algorithm and
the hooks that put the DDTREE flags into ``ServerArgs``; everything heavy is imported lazily.
Upstream only LOGS plugin errors, so an unsupported SGLang raises a ``RuntimeError`` whose message
is the whole diagnosis.
"""

from __future__ import annotations

import logging

from sglang_ddtree.config import ALGORITHM_NAME
from sglang_ddtree.version import SUPPORTED_SGLANG_SPEC

logger = logging.getLogger(__name__)

_registered = False


def installed_sglang_version():
    """The installed SGLang distribution's version string, or None when SGLang is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


def sglang_version_supported(found) -> bool:
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    if found is None:
        return False
    try:
        return Version(found) in SpecifierSet(SUPPORTED_SGLANG_SPEC)
    except InvalidVersion:
        return False


def check_sglang_version() -> str:
    """Return the installed SGLang version or raise ``RuntimeError`` when it is outside the range."""
    found = installed_sglang_version()
    if not sglang_version_supported(found):
        raise RuntimeError(
            f"sglang-ddtree supports sglang{SUPPORTED_SGLANG_SPEC}, but "
            f"{'no sglang is installed' if found is None else f'sglang {found} is installed'}. "
            f"Install a supported release (pip install 'sglang{SUPPORTED_SGLANG_SPEC}') or an "
            "sglang-ddtree release made for your SGLang. DDTREE is NOT available in this process."
        )
    return found


def register_algorithm() -> None:
    """Register the DDTREE name in SGLang's speculative-algorithm registry (once; no hooks). ``register`` does it;
    tests that publish DDTREE server args without the plugin's hooks call it alone (from 0.5.19 publishing
    resolves the algorithm by name)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import get_spec

    from sglang_ddtree.algorithm import DDTreeSpecAlgo, worker_factory

    if get_spec(ALGORITHM_NAME) is None:
        SpeculativeAlgorithm.register(ALGORITHM_NAME, supports_overlap=True, spec_class=DDTreeSpecAlgo)(
            worker_factory
        )


def register() -> None:
    """Register DDTREE with SGLang. Safe to call any number of times in a process."""
    global _registered
    if _registered:
        return
    check_sglang_version()

    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from sglang_ddtree.server_args import DDTreeServerArgs, prepare_server_args_one_line_errors

    register_algorithm()
    for target in (
        "sglang.srt.server_args.ServerArgs",
        "sglang.srt.entrypoints.engine.Engine.server_args_class",
    ):
        HookRegistry.register(target, DDTreeServerArgs, HookType.REPLACE)
    HookRegistry.register("sglang.srt.server_args.prepare_server_args", prepare_server_args_one_line_errors,
                          HookType.AROUND)
    from sglang_ddtree.worker.hooks import install_hooks

    install_hooks()  # CUDA-graph capture with a tree mask, KV sizing, metrics, per-request checks
    _registered = True
    logger.info("sglang-ddtree: registered speculative algorithm %s", ALGORITHM_NAME)

