"""Which upstream release family is installed, and the adapter that speaks to it.

Every difference between supported SGLang releases that the package must act on lives in one adapter
module per release family (``sglang_0_5_16``, ``sglang_0_5_18``, ...); each family's ``Adapter`` class
subclasses the previous family's and overrides only what its releases changed. The rest of the package
asks ``adapter()`` and never compares versions itself. Which releases are supported at all is
``sglang_ddtree.version`` (checked at plugin load before any adapter is used).
"""

from __future__ import annotations

import functools
import importlib
from typing import NamedTuple, Optional, Tuple


class Family(NamedTuple):
    first: str  # the family's oldest release; it runs up to the next family's first
    module: str  # the adapter module, under sglang_ddtree.compat
    what: str  # what changed at ``first`` that the adapter handles


FAMILIES: Tuple[Family, ...] = (
    Family("0.5.16", "sglang_0_5_16", "the baseline: runners read their own server_args (0.5.17: also get_spec())"),
    Family("0.5.17", "sglang_0_5_17", "backends, graph runners and reporters read the widths from get_spec()"),
    Family("0.5.18", "sglang_0_5_18", "three hooked functions lose server_args; ServerArgs.override gone"),
    Family("0.5.19", "sglang_0_5_19", "resolution declares (resolve_once); KV-length renames; result processor; fa3"),
    Family("0.5.20", "sglang_0_5_20", "ServerArgs a msgspec Struct, sealed; custom algorithms resolve on a stand-in"),
    Family("0.5.21", "sglang_0_5_21", "DFlashWorkerV2.__init__ without ps"),
    Family("0.5.22", "sglang_0_5_22", "attention data parallelism is --attn-dp-size"),
    Family("0.5.23", "sglang_0_5_23", "deferred target-verify logits gather; trtllm_mha page table moved"),
)


def family_of(version: str) -> Family:
    """The family ``version`` belongs to (the last whose ``first`` is not newer); ValueError below the oldest."""
    from packaging.version import Version

    found = [f for f in FAMILIES if Version(f.first) <= Version(version)]
    if not found:
        raise ValueError(f"sglang {version} is older than the oldest release family ({FAMILIES[0].first})")
    return found[-1]


def _installed_version() -> Optional[str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def adapter_for(version: str):
    """The adapter instance of ``version``'s family."""
    family = family_of(version)
    return importlib.import_module(f"sglang_ddtree.compat.{family.module}").Adapter(version)


@functools.lru_cache(maxsize=None)
def adapter():
    """The adapter of the installed SGLang (RuntimeError when none is installed). Cached: the decode round
    asks it, and reading the installed version from package metadata costs a directory scan."""
    found = _installed_version()
    if found is None:
        raise RuntimeError("sglang is not installed: no upstream adapter applies")
    return adapter_for(found)
