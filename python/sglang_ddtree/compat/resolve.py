"""Checking one entry of the upstream symbol list (``sglang_ddtree.compat``) against the installed SGLang.

``check_symbol`` resolves an entry by its kind (module found, attribute imported, class member, instance
attribute, dataclass / msgspec field, parameter names); ``upstream_has`` and ``self_assigned_in`` are also
what the scan test and ``scripts/check_upstream.py`` read a release's classes with. Serves no step of the
round: it is the doctor's and the tests' view of the upstream surface. Imports SGLang only when called.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import importlib
import importlib.util
import inspect
import textwrap
from typing import List, NamedTuple, Set, Tuple

MODULE, ATTR, MEMBER, INSTANCE, FIELD, PARAMS = "module", "attr", "member", "instance", "field", "params"
KINDS = (MODULE, ATTR, MEMBER, INSTANCE, FIELD, PARAMS)


class Symbol(NamedTuple):
    path: str  # dotted upstream path; PARAMS: "dotted.callable(name, name)"
    purpose: str  # what we use it for (and where)
    kind: str = ATTR
    releases: str = ""  # PEP 440 specifier of the releases that have it (one adapter's); "" = every one


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


def _upstream_mro(cls) -> List[type]:
    """``cls`` and its bases without ours (a REPLACE hook may have put our subclass in upstream's place)
    and without ``object``."""
    if not isinstance(cls, type):
        raise TypeError(f"{cls!r} is not a class")
    return [k for k in cls.__mro__ if k is not object and not k.__module__.startswith("sglang_ddtree")]


def _field_names(cls) -> Set[str]:
    names: Set[str] = set()
    for k in _upstream_mro(cls):
        if dataclasses.is_dataclass(k):
            names.update(f.name for f in dataclasses.fields(k))
        struct_fields = getattr(k, "__struct_fields__", None)  # msgspec.Struct subclasses (a tuple)
        if isinstance(struct_fields, tuple):
            names.update(struct_fields)
    return names


def _is_member(cls, name: str) -> bool:
    return any(name in k.__dict__ for k in _upstream_mro(cls)) or (
        isinstance(cls, enum.EnumMeta) and name in cls.__members__)


@functools.lru_cache(maxsize=None)
def _self_assigned(cls) -> frozenset:
    """Names the source of ``cls`` assigns on ``self`` (``self.<name> = ...``, ``setattr(self, "<name>", ...)``)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return frozenset()
    return self_assigned_in(tree)


def self_assigned_in(tree: ast.AST) -> frozenset:
    """Names code under ``tree`` (a class's AST) assigns on ``self``; also ``scripts/check_upstream.py``'s reading
    of a release's source."""
    names = set()
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        for t in targets:
            for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                    names.add(e.attr)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id == "self"
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            names.add(node.args[1].value)
    return frozenset(names)


def _assigned_on_self(cls, name: str) -> bool:
    return any(name in _self_assigned(k) for k in _upstream_mro(cls))


def upstream_has(cls, name: str) -> bool:
    """Whether upstream class ``cls`` (or an upstream base) has ``name`` on its instances: a member, a
    field, or an attribute its code assigns on ``self``."""
    return _is_member(cls, name) or name in _field_names(cls) or _assigned_on_self(cls, name)


def _split_params(path: str) -> Tuple[str, List[str]]:
    callee, _, rest = path.partition("(")
    return callee, [n.strip() for n in rest.rstrip(")").split(",") if n.strip()]


def check_symbol(sym: Symbol) -> None:
    """Raise (ImportError, AttributeError, TypeError, ...) unless ``sym`` resolves in this environment."""
    if sym.kind == MODULE:
        if importlib.util.find_spec(sym.path) is None:  # a missing parent package raises here
            raise ModuleNotFoundError(f"no module named {sym.path!r}", name=sym.path)
        return
    if sym.kind == ATTR:
        resolve(sym.path)
        return
    if sym.kind == PARAMS:
        callee, names = _split_params(sym.path)
        params = inspect.signature(resolve(callee)).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return
        missing = [n for n in names if n not in params]
        if missing:
            raise TypeError(f"{callee} has no parameter {', '.join(missing)}")
        return
    owner_path, _, name = sym.path.rpartition(".")
    owner = resolve(owner_path)
    has = {MEMBER: _is_member, FIELD: lambda c, n: n in _field_names(c), INSTANCE: upstream_has}[sym.kind]
    if not has(owner, name):
        what = {MEMBER: "member", FIELD: "field", INSTANCE: "instance attribute"}[sym.kind]
        raise AttributeError(f"{owner_path} has no {what} {name!r}")


# Packages with their own doctor check whose symbols are not checked where the package is absent.
OWN_CHECK_PACKAGES = {"sgl_kernel": "sgl_kernel is not installed (a CUDA-only wheel; see the sgl-kernel check)"}


# Upstream modules that import such a package at import time (their symbols share its fate).
MODULES_NEEDING = {"sglang.srt.layers.attention.flashattention_backend": "sgl_kernel"}


def needed_package(sym: Symbol) -> str:
    """The top-level package ``sym`` needs to resolve: its own, or the one its module imports
    (``MODULES_NEEDING``)."""
    for module, package in MODULES_NEEDING.items():
        if sym.path.startswith(module + "."):
            return package
    return sym.path.split(".")[0]


def _absent_package(sym: Symbol) -> str:
    """Why ``sym`` is not checked here ('' when it is): the package it needs (``needed_package``) has its own
    check and is absent."""
    top = needed_package(sym)
    if top in OWN_CHECK_PACKAGES and importlib.util.find_spec(top) is None:
        return OWN_CHECK_PACKAGES[top]
    return ""
