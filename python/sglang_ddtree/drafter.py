"""Argument-time check that ``--speculative-draft-model-path`` names a DFlash drafter (DRAFT step's model).

A path that does not exist would otherwise reach Hugging Face as a repo id and fail with an unrelated
error, and a target checkpoint given as the drafter would pass validation and fail much later. Local
paths are checked here; anything that is not a local path (an ``org/name`` repo id) is left to SGLang's
own loader. Imports neither torch nor SGLang.
"""

from __future__ import annotations

import json
import os

DRAFT_FLAG = "--speculative-draft-model-path"


def _looks_local(path: str) -> bool:
    """A filesystem path rather than a Hugging Face repo id (``org/name`` or a bare name)."""
    return (
        os.path.isabs(path)
        or path.startswith(("./", "../", "~"))
        or path in (".", "..")
        or path.count("/") >= 2
    )


def check_dflash_drafter(path: str) -> None:
    """Raise ``ValueError`` (one clear line) unless a local ``path`` is a DFlash drafter checkpoint:
    a directory whose config.json names a DFlash architecture or carries a ``dflash_config``."""
    from sglang_ddtree.config import DDTreeArgumentError

    path = str(path)
    expanded = os.path.expanduser(path)
    if not os.path.exists(expanded):
        if _looks_local(path):
            raise DDTreeArgumentError(f"{DRAFT_FLAG} {path}: no such directory (a DFlash drafter checkpoint).")
        return  # a repo id: SGLang's loader resolves (or refuses) it
    config_path = os.path.join(expanded, "config.json")
    if not os.path.isfile(config_path):
        raise DDTreeArgumentError(f"{DRAFT_FLAG} {path}: no config.json there (a DFlash drafter checkpoint).")
    try:
        with open(config_path) as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise DDTreeArgumentError(f"{DRAFT_FLAG} {path}: cannot read config.json ({e}).") from e
    architectures = list(config.get("architectures") or [])
    if "dflash_config" in config or any(str(a).startswith("DFlash") for a in architectures):
        return
    raise DDTreeArgumentError(
        f"{DRAFT_FLAG} {path} is not a DFlash drafter: its config.json has architectures {architectures} "
        "and no dflash_config (a DFlash drafter has architectures ['DFlashDraftModel'] and a dflash_config; "
        "is this the target model?)."
    )
