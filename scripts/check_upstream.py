"""Static compatibility scan of SGLang releases against ``sglang_ddtree.compat``'s symbol list.

    python scripts/check_upstream.py 0.5.16 0.5.17 [...] [--out FILE] [--cache DIR]

For each release: fetch its wheel (``pip download --no-deps``; the sdist when there is none), unpack
its ``.py`` files to a temp dir and read every ``compat.symbols_for(release)`` entry from the source with ``ast``
(no import: a release needs its own torch). Statuses: ok | moved (not at its path, but a def / class
of that name is elsewhere; for an attribute, a top-level def of that name or another class of the
owner's module has it) | missing | signature-changed (a PARAMS entry: a keyword name that is no
parameter, or, where its purpose says "positional", names that no longer lead the signature in that
order) | not-checked (a package outside the sglang wheel: sgl_kernel). Names resolve through
``from x import y`` re-exports, star imports and ``X = Y`` aliases; classes through their upstream
bases, and a struct that its module rebuilds (ServerArgs since 0.5.20) through the classes it takes.
The first version is the baseline: the report notes every callable on the list whose parameters
differ from it, and a missing attribute lists what its owner gained since (a rename shows there).
Prints a table, writes one JSON report (``--out``); exits 1 when a release has missing or changed
entries.

    python scripts/check_upstream.py 0.5.17 --run-suite --suite-out FILE [--keep-env] [--keep-version-gate]

Instead runs the CPU suite of HEAD (``git archive``, so not the work tree's edits; ``--commit REV``) against the release:
a venv under /tmp holding that sglang wheel and our wheel (``--no-deps``), over a hard-linked copy of
the base venv's site-packages (``--base-venv``, default .venv, only read) for torch, transformers and
the rest. The snapshot's ``version.py`` range is raised past a release outside it (unless --keep-version-gate),
so the suite shows what breaks beyond the gate; a supported release runs the snapshot as it is. The result records the release's pins (torch,
transformers, ...) against what that environment has: a mismatch is a caveat of the run, stated there.
It counts pass / fail / error from pytest's closing line and groups each failure (junit XML) by cause:
``CAUSES`` below, else by its root error line. ``--reclassify FILE`` re-groups a written result.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
from sglang_ddtree import compat  # noqa: E402  (stdlib only: no SGLang import)

OK, MOVED, MISSING, CHANGED, UNCHECKED = "ok", "moved", "missing", "signature-changed", "not-checked"
STATUSES = (OK, MOVED, MISSING, CHANGED, UNCHECKED)
PINNED = ("torch", "sglang-kernel", "sgl-kernel", "flashinfer-python", "transformers")
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "sglang-ddtree", "upstream")
MAX_HOPS = 8  # re-export chains followed (from x import y, star imports, X = Y aliases)


# ---- the release's source, read with ast ---------------------------------------------------------
class Target(NamedTuple):
    kind: str  # "module" | "class" | "def" | "assign" | "member" | "external"
    module: str  # dotted module where it is defined
    node: Optional[ast.AST] = None


def _dotted(expr: ast.AST) -> Optional[str]:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        head = _dotted(expr.value)
        return None if head is None else f"{head}.{expr.attr}"
    return None


def _walk_body(body):
    """Statements of a module / class body, entering if / try / with blocks (not defs)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            for block in ("body", "orelse", "finalbody"):
                yield from _walk_body(getattr(stmt, block, []))
            for handler in getattr(stmt, "handlers", []):
                yield from _walk_body(handler.body)


def _target_names(stmt) -> List[str]:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    out = []
    for t in targets:
        out.extend(e.id for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]) if isinstance(e, ast.Name))
    return out


class _Module:
    """Top-level bindings of one source file: {name: [binding, ...]} and its star imports."""

    def __init__(self, name: str, is_package: bool, source: str):
        self.name = name
        self.package = name if is_package else name.rpartition(".")[0]
        self.names: Dict[str, list] = {}
        self.stars: List[str] = []
        try:
            tree = ast.parse(source)
        except SyntaxError:
            tree = ast.Module(body=[], type_ignores=[])
        self.body = list(_walk_body(tree.body))
        for stmt in self.body:
            if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                self._bind(stmt.name, ("class" if isinstance(stmt, ast.ClassDef) else "def", stmt))
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                for n in _target_names(stmt):
                    self._bind(n, ("assign", stmt))
            elif isinstance(stmt, ast.ImportFrom):
                src = self._absolute(stmt)
                for alias in stmt.names:
                    if alias.name == "*":
                        self.stars.append(src)
                    else:
                        self._bind(alias.asname or alias.name, ("from", src, alias.name))
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.asname:
                        self._bind(alias.asname, ("module", alias.name))
                    else:
                        self._bind(alias.name.split(".")[0], ("module", alias.name.split(".")[0]))

    def _bind(self, name, binding):
        self.names.setdefault(name, []).append(binding)

    def _absolute(self, stmt: ast.ImportFrom) -> str:
        if not stmt.level:
            return stmt.module or ""
        base = self.package.split(".")
        base = base[: len(base) - (stmt.level - 1)]
        return ".".join(base + ([stmt.module] if stmt.module else []))


_PRIORITY = {"class": 0, "def": 0, "from": 1, "module": 1, "assign": 2}


class SourceTree:
    """The ``.py`` files under ``root`` (a dir holding ``sglang/``), as modules, classes and signatures."""

    def __init__(self, root: str, packages: Optional[Sequence[str]] = None):
        self.root = root
        self.files: Dict[str, Tuple[str, bool]] = {}  # dotted -> (path, is_package); namespace dirs too
        for dirpath, dirnames, filenames in os.walk(root):
            rel = os.path.relpath(dirpath, root)
            dirnames[:] = sorted(d for d in dirnames if d.isidentifier() and (
                rel != "." or packages is None or d in packages))
            if rel == "." and packages is not None:
                filenames = [f for f in filenames if f[:-3] in packages]
            parts = [] if rel == "." else rel.split(os.sep)
            for fn in sorted(filenames):
                if fn.endswith(".py") and fn[:-3].isidentifier():
                    is_pkg = fn == "__init__.py"
                    dotted = ".".join(parts + ([] if is_pkg else [fn[:-3]]))
                    if dotted:
                        self.files[dotted] = (os.path.join(dirpath, fn), is_pkg)
                    for i in range(1, len(parts) + 1):  # namespace packages (no __init__.py) exist too
                        self.files.setdefault(".".join(parts[:i]), ("", True))
        self.tops = {d.split(".")[0] for d in self.files}
        self._modules: Dict[str, _Module] = {}
        self._mro: Dict[tuple, List[Target]] = {}
        self._assigned: Dict[tuple, frozenset] = {}

    def is_module(self, name: str) -> bool:
        return name in self.files

    def module(self, name: str) -> Optional[_Module]:
        if name not in self.files:
            return None
        if name not in self._modules:
            path, is_pkg = self.files[name]
            src = open(path, encoding="utf-8", errors="replace").read() if path else ""
            self._modules[name] = _Module(name, is_pkg, src)
        return self._modules[name]

    def defs_of(self, name: str) -> List[str]:
        """Modules with a top-level def / class ``name`` (a text search first: parses only the hits)."""
        pattern = re.compile(rf"^[ \t]*(?:async[ \t]+def|def|class)[ \t]+{re.escape(name)}\b", re.M)
        out = []
        for modname, (path, _) in sorted(self.files.items()):
            if path and pattern.search(open(path, encoding="utf-8", errors="replace").read()) and any(
                    b[0] in ("class", "def") for b in self.module(modname).names.get(name, [])):
                out.append(modname)
        return out

    def where(self, t: Target) -> str:
        path = self.files.get(t.module, ("", False))[0]
        line = getattr(t.node, "lineno", None)
        return os.path.relpath(path, self.root) + (f":{line}" if line else "") if path else t.module

    # -- names ------------------------------------------------------------------------------------
    def lookup(self, module: str, name: str, hops: int = 0) -> Optional[Target]:
        """What ``module.name`` is at run time: a def / class / assignment, a module, or something from
        outside the tree; None when the release does not have it."""
        if module.split(".")[0] not in self.tops:
            return Target("external", module)
        mod = self.module(module)
        if mod is None or hops > MAX_HOPS:
            return None
        for b in sorted(mod.names.get(name, []), key=lambda b: _PRIORITY[b[0]]):
            if b[0] in ("class", "def"):
                return Target(b[0], module, b[1])
            if b[0] == "module":
                return Target("module", b[1]) if self.is_module(b[1]) or b[1].split(".")[0] not in self.tops \
                    else None
            if b[0] == "from":
                if self.is_module(f"{b[1]}.{b[2]}"):
                    return Target("module", f"{b[1]}.{b[2]}")
                found = self.lookup(b[1], b[2], hops + 1)
                if found is not None:
                    return found
            if b[0] == "assign":
                return self._alias(module, b[1], hops) or Target("assign", module, b[1])
        for star in mod.stars:
            if not name.startswith("_"):
                found = self.lookup(star, name, hops + 1)
                if found is not None and found.kind != "external":
                    return found
        if self.is_module(f"{module}.{name}"):
            return Target("module", f"{module}.{name}")
        return None

    def _alias(self, module: str, stmt, hops: int) -> Optional[Target]:
        """``X = Y`` / ``X = mod.Y``: what Y is (for signatures and members)."""
        value = _dotted(stmt.value) if stmt.value is not None else None
        if value is None:
            return None
        head, *rest = value.split(".")
        t = self.lookup(module, head, hops + 1) if head not in _target_names(stmt) else None
        for part in rest:
            t = self.attr(t, part, hops + 1) if t is not None else None
        return t if t is not None and t.kind in ("class", "def", "member") else None

    def attr(self, t: Target, name: str, hops: int = 0) -> Optional[Target]:
        if t.kind == "module":
            return self.lookup(t.module, name, hops)
        if t.kind == "class":
            for k in self.mro(t):
                found = _class_member(k.node, name)
                if found is not None:
                    if isinstance(found, ast.ClassDef):
                        return Target("class", k.module, found)
                    return Target("member", k.module, found)
            for k in (c for base in self.mro(t) for c in self.composed(base)):  # a rebuilt struct's fields
                found = _class_member(k.node, name)
                if isinstance(found, ast.AnnAssign):
                    return Target("member", k.module, found)
            return None
        return None

    def resolve(self, path: str) -> Tuple[Optional[Target], str]:
        """(target, "") or (None, the prefix of ``path`` up to the first component not found)."""
        parts = path.split(".")
        for split in range(len(parts), 0, -1):
            if self.is_module(".".join(parts[:split])):
                t = Target("module", ".".join(parts[:split]))
                for j in range(split, len(parts)):
                    t = self.attr(t, parts[j])
                    if t is None:
                        return None, ".".join(parts[: j + 1])
                return t, ""
        return None, parts[0]

    # -- classes ----------------------------------------------------------------------------------
    def bases(self, t: Target) -> List[Target]:
        out = []
        for expr in t.node.bases:
            dotted = _dotted(expr.value if isinstance(expr, ast.Subscript) else expr)
            if dotted is None:
                continue
            head, *rest = dotted.split(".")
            b = self.lookup(t.module, head)
            for part in rest:
                b = self.attr(b, part) if b is not None and b.kind != "external" else b
            if b is not None and b.kind == "class":
                out.append(b)
            else:
                out.append(Target("external", dotted))
        return out

    def mro(self, t: Target) -> List[Target]:
        """``t`` and its upstream bases, depth first (upstream classes only; enough for lookups)."""
        key = (t.module, t.node.lineno)
        if key not in self._mro:
            self._mro[key] = self._linearise(t)
        return self._mro[key]

    def _linearise(self, t: Target) -> List[Target]:
        out, todo, seen = [], [t], set()
        while todo:
            k = todo.pop(0)
            key = (k.module, getattr(k.node, "name", None), getattr(k.node, "lineno", None))
            if k.kind != "class" or key in seen or len(seen) > 64:
                continue
            seen.add(key)
            out.append(k)
            todo[:0] = self.bases(k)
        return out

    def external_bases(self, t: Target) -> List[str]:
        return [b.module for k in self.mro(t) for b in self.bases(k) if b.kind == "external"]

    def composed(self, t: Target) -> List[Target]:
        """Classes whose fields a module-level rebuild of ``t`` takes in (``X = msgspec.defstruct("X",
        fields of [A, B, ...], namespace=vars(X))``, as ServerArgs since 0.5.20): every class reached from
        the rebuilding call through the module-level assignments of the names it uses."""
        mod, name = self.module(t.module), t.node.name
        rebuilt = [s for s in mod.body if isinstance(s, ast.Assign) and s.lineno > t.node.lineno
                   and name in _target_names(s) and isinstance(s.value, ast.Call)]
        if not rebuilt:
            return []
        todo, seen, out = [rebuilt[-1].value], set(), []
        while todo:
            for node in ast.walk(todo.pop()):
                if not isinstance(node, ast.Name) or node.id in seen:
                    continue
                seen.add(node.id)
                for stmt in mod.body:  # what the module assigns to that name (or to its attributes)
                    if isinstance(stmt, ast.Assign) and stmt is not rebuilt[-1] and any(
                            node.id in _target_names(stmt) or _dotted(tg) and _dotted(tg).split(".")[0] == node.id
                            for tg in stmt.targets):
                        todo.append(stmt.value)
                k = self.lookup(t.module, node.id) if node.id != name else None
                if k is not None and k.kind == "class":
                    out.append(k)
        return out

    def names(self, owner: Target, kind: str) -> set:
        """The names ``owner`` (and its upstream bases) has, as ``kind`` counts them."""
        classes = self.mro(owner)
        members = {n for k in classes for n in _class_names(k.node)}
        fields = {n for k in classes + [c for k in classes for c in self.composed(k)] for n in _fields(k.node)}
        if kind == compat.MEMBER:
            return members
        if kind == compat.FIELD:
            return fields
        return members | fields | {n for k in classes for n in self.self_assigned(k)}  # INSTANCE

    def self_assigned(self, t: Target) -> frozenset:
        key = (t.module, t.node.lineno)
        if key not in self._assigned:
            self._assigned[key] = compat.self_assigned_in(t.node)
        return self._assigned[key]

    def has(self, owner: Target, name: str, kind: str) -> bool:
        return name in self.names(owner, kind)

    # -- signatures -------------------------------------------------------------------------------
    def params(self, t: Target) -> Optional[Tuple[List[str], List[str], bool, List[str]]]:
        """(positional names, all names, has **kwargs, names without a default) of a callable; None
        when it cannot be read."""
        if t.kind in ("def", "member") and isinstance(t.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = t.node.args
            positional = [x.arg for x in a.posonlyargs + a.args]
            required = positional[: len(positional) - len(a.defaults)]
            decorators = {(_dotted(d) or "").split(".")[-1] for d in t.node.decorator_list}
            if t.kind == "member" and "staticmethod" not in decorators and positional:
                positional, required = positional[1:], required[1:]  # self / cls
            names = positional + ([a.vararg.arg] if a.vararg else []) + [x.arg for x in a.kwonlyargs]
            required += [x.arg for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
            return positional, names, a.kwarg is not None, required
        if t.kind == "class":
            classes = self.mro(t)
            for i, k in enumerate(classes):
                init = _class_member(k.node, "__init__")
                if isinstance(init, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    return self.params(Target("member", k.module, init))
                if _is_record(k.node) or any(b.split(".")[-1] in _RECORD_BASES for b in self.external_bases(k)):
                    names: List[str] = []
                    for base in reversed(classes[i:]):
                        names.extend(n for n in _fields(base.node, init_only=True) if n not in names)
                    required = [n for base in classes[i:] for n in _fields(base.node, required_only=True)]
                    return names, names, False, [n for n in names if n in required]
        return None


_RECORD_BASES = {"Struct", "NamedTuple", "BaseModel"}


def _class_names(cls: ast.ClassDef) -> List[str]:
    out = []
    for stmt in _walk_body(cls.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(stmt.name)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            out.extend(_target_names(stmt))
    return out


def _class_member(cls: ast.ClassDef, name: str):
    """The statement of ``cls``'s body that binds ``name`` (def, nested class, assignment, annotation)."""
    for stmt in _walk_body(cls.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == name:
            return stmt
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and name in _target_names(stmt):
            return stmt
    return None


def _is_classvar(ann: ast.AST) -> bool:
    base = ann.value if isinstance(ann, ast.Subscript) else ann
    return (_dotted(base) or "").split(".")[-1] == "ClassVar" or (
        isinstance(ann, ast.Constant) and str(ann.value).startswith("ClassVar"))


def _fields(cls: ast.ClassDef, init_only: bool = False, required_only: bool = False) -> List[str]:
    """Annotated class-level names of ``cls`` (dataclass / struct fields), in order."""
    out = []
    for stmt in _walk_body(cls.body):
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and not _is_classvar(stmt.annotation):
            if required_only and stmt.value is not None:
                continue
            if init_only and isinstance(stmt.value, ast.Call) and any(
                    kw.arg == "init" and isinstance(kw.value, ast.Constant) and kw.value.value is False
                    for kw in stmt.value.keywords):
                continue
            out.append(stmt.target.id)
    return out


def _is_record(cls: ast.ClassDef) -> bool:
    for d in cls.decorator_list:
        name = _dotted(d.func if isinstance(d, ast.Call) else d) or ""
        if name.split(".")[-1] == "dataclass":
            return True
    return False


# ---- checking the symbol list ---------------------------------------------------------------------
def _split_params(path: str) -> Tuple[str, List[str]]:
    callee, _, rest = path.partition("(")
    return callee, [n.strip() for n in rest.rstrip(")").split(",") if n.strip()]


def _positional(sym) -> bool:
    """A PARAMS entry whose purpose says we pass the names positionally: they must lead the signature
    in that order. Other entries list keyword arguments (in call order): each must be a parameter."""
    return "positional" in sym.purpose


def _check_at(tree: SourceTree, sym, path: str) -> Tuple[str, dict, str]:
    """(status, details, the name that was not found or "") of ``sym`` read at ``path``."""
    if sym.kind == compat.MODULE:
        return ((OK, {"at": tree.where(Target("module", path))}, "") if tree.is_module(path)
                else (MISSING, {"detail": "no such module"}, path))
    callee = _split_params(path)[0] if sym.kind == compat.PARAMS else path
    owner = callee if sym.kind in (compat.ATTR, compat.PARAMS) else callee.rpartition(".")[0]
    t, absent = tree.resolve(owner)
    if t is None:
        return MISSING, {"detail": f"no {absent}"}, absent
    info = {"at": tree.where(t)}
    if sym.kind == compat.ATTR:
        sig = tree.params(t) if t.kind in ("def", "member") else None
        return OK, (dict(info, params=sig[1], required=sig[3]) if sig else info), ""  # hook targets: noted
    if sym.kind == compat.PARAMS:
        names = _split_params(path)[1]
        sig = tree.params(t)
        if sig is None:
            return UNCHECKED, dict(info, detail="signature not readable from the source"), ""
        positional, params, var_kw, required = sig
        info.update(expected=names, params=params, required=required)
        if _positional(sym):
            ok = positional[: len(names)] == names
            info["rule"] = "positional: the names lead the signature in this order"
        else:
            ok = var_kw or all(n in params for n in names)
            info["rule"] = "keywords: each name is a parameter" + (" (takes **kwargs)" if var_kw else "")
        if not ok:
            info["missing_params"] = [n for n in names if n not in params]
        return (OK if ok else CHANGED), info, ""
    if t.kind != "class":
        return MISSING, dict(info, detail=f"{owner} is a {t.kind}, not a class"), ""
    name = callee.rpartition(".")[2]
    if tree.has(t, name, sym.kind):
        hit = tree.attr(t, name)
        if hit is None:
            return OK, info, ""
        sig = tree.params(hit) if sym.kind == compat.MEMBER and hit.kind == "member" else None
        return OK, dict({"at": tree.where(hit)}, **({"params": sig[1], "required": sig[3]} if sig else {})), ""
    what = {compat.MEMBER: "member", compat.FIELD: "field", compat.INSTANCE: "instance attribute"}[sym.kind]
    return MISSING, dict(info, detail=f"{owner} (or an upstream base) has no {what} {name!r}"), callee


def _moved(tree: SourceTree, sym, absent: str) -> Optional[Tuple[str, dict]]:
    """Where ``absent`` (the prefix of ``sym``'s path up to the module, name or attribute not found)
    went: a module of that name; a def / class of that name in another module; for an attribute, a
    top-level def of that name (a method that became a function) or another class of the owner's module
    that has it (a field that moved to a sub-record, as Req.kv_committed_len to ReqKvInfo in 0.5.19)."""
    if sym.kind == compat.MODULE:
        last = sym.path.rpartition(".")[2]
        hits = sorted(m for m in tree.files if m.rpartition(".")[2] == last and m != sym.path)
        return (MOVED, {"moved_to": hits[0], "candidates": hits}) if hits else None
    parts = sym.path.partition("(")[0].split(".")
    owner, _, absent = absent.rpartition(".")
    if owner.count(".") == len(parts) - 2 and sym.kind in (compat.MEMBER, compat.FIELD, compat.INSTANCE):
        hits = [(f"{m}.{absent}", tree.lookup(m, absent)) for m in tree.defs_of(absent)] \
            if sym.kind == compat.MEMBER else []
        owner_t = tree.resolve(owner)[0]
        for n, bindings in sorted(tree.module(owner_t.module).names.items()):
            for b in bindings:
                k = Target("class", owner_t.module, b[1])
                if b[0] == "class" and b[1] is not owner_t.node and tree.has(k, absent, sym.kind):
                    hits.append((f"{owner_t.module}.{n}.{absent}", tree.attr(k, absent) or k))
        if not hits:
            return None
        return MOVED, {"moved_to": hits[0][0], "at": tree.where(hits[0][1]), "candidates": [h[0] for h in hits[:8]]}
    tail = sym.path[len(owner) + 1:]  # "Name.attr(args)"
    candidates = [m for m in tree.defs_of(absent) if m != owner]
    for module in candidates:
        status, info, _ = _check_at(tree, sym, f"{module}.{tail}")
        if status in (OK, CHANGED):
            return (MOVED if status == OK else CHANGED), dict(info, moved_to=f"{module}.{tail}".partition("(")[0],
                                                              candidates=candidates[:8])
    return None


def check_symbol(tree: SourceTree, sym, baseline: Optional[SourceTree] = None) -> dict:
    out = {"path": sym.path, "kind": sym.kind}
    top = sym.path.split(".")[0]
    if top not in tree.tops:
        return dict(out, status=UNCHECKED, detail=f"{top} is not part of this release's source (its own wheel)")
    status, info, absent = _check_at(tree, sym, sym.path)
    if status == MISSING and absent:
        found = _moved(tree, sym, absent)
        if found is not None:
            status, info = found[0], dict(info, **found[1])
    if status == MISSING and absent and sym.kind in (compat.MEMBER, compat.FIELD, compat.INSTANCE) and baseline:
        owner_path = sym.path.rpartition(".")[0]
        now, then = tree.resolve(owner_path)[0], baseline.resolve(owner_path)[0]
        if now is not None and then is not None and now.kind == then.kind == "class":
            new = sorted(tree.names(now, sym.kind) - baseline.names(then, sym.kind))
            info["new_on_owner"] = new[:12] + ([f"... {len(new) - 12} more"] if len(new) > 12 else [])
    if status != OK:
        out["purpose"] = sym.purpose
    return dict(out, status=status, **info)


def analyse(root: str, symbols: Sequence, baseline_root: Optional[str] = None,
            packages: Optional[Sequence[str]] = None) -> List[dict]:
    """Check ``symbols`` (compat.Symbol) against the unpacked source under ``root`` (a dir holding
    ``sglang/``; ``packages`` limits the walk to those top-level packages). With ``baseline_root`` (an
    older release), a missing attribute also lists the names its owner gained since (a rename shows)."""
    tree = SourceTree(root, packages)
    baseline = SourceTree(baseline_root, packages) if baseline_root else None
    return [check_symbol(tree, compat.Symbol(*s), baseline) for s in symbols]


def counts(results: Sequence[dict]) -> Dict[str, int]:
    out = dict.fromkeys(STATUSES, 0)
    for r in results:
        out[r["status"]] += 1
    return out


def signature_notes(results: Sequence[dict], baseline: Sequence[dict]) -> Dict[str, dict]:
    """{callable: change} for the callables on the list (PARAMS entries, hook targets, methods we
    override or call) whose parameter list differs from the baseline's, whatever their status.
    ``added_required``: new parameters without a default (a call that does not pass them breaks)."""
    before = {r["path"]: r for r in baseline if r.get("params") is not None}
    notes = {}
    for r in results:
        old, callee = before.get(r["path"]), r["path"].partition("(")[0]
        if old is None or r.get("params") is None or old["params"] == r["params"] or callee in notes:
            continue
        added = [n for n in r["params"] if n not in old["params"]]
        notes[callee] = {"added": added, "removed": [n for n in old["params"] if n not in r["params"]],
                         "added_required": [n for n in added if n in r.get("required", [])]}
    return notes


def _slim(results: Sequence[dict]) -> None:
    """Drop the parameter lists kept for ``signature_notes`` from entries that need none in the report."""
    for r in results:
        if r["kind"] != compat.PARAMS or r["status"] == OK:
            r.pop("required", None)
        if r["kind"] != compat.PARAMS and r["status"] == OK:
            r.pop("params", None)


# ---- fetching and unpacking a release ---------------------------------------------------------------
def _cached(version: str, cache: str) -> Optional[str]:
    for pattern in (f"sglang-{version}-*.whl", f"sglang-{version}.tar.gz", f"sglang-{version}.zip"):
        hits = sorted(glob.glob(os.path.join(cache, pattern)))
        if hits:
            return hits[0]
    return None


# Where pip finds no wheel for this machine (SGLang ships per-Python linux wheels only, and no sdist
# since 0.5.10.post1), any other flavour will do: the .py files are the same.
_ATTEMPTS = (["--only-binary=:all:"],
             ["--only-binary=:all:", "--platform", "manylinux_2_34_x86_64", "--python-version", "3.11"],
             ["--no-binary=:all:"])


def fetch_release(version: str, cache: str) -> str:
    """Path of the release's wheel (or sdist) in ``cache``, downloaded with pip when absent."""
    os.makedirs(cache, exist_ok=True)
    errors = []
    for extra in _ATTEMPTS:
        if _cached(version, cache):
            break
        cmd = [sys.executable, "-m", "pip", "download", f"sglang=={version}", "--no-deps", *extra, "-d", cache,
               "--disable-pip-version-check", "-q"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        errors.append(f"{' '.join(extra)}: {proc.stderr.strip()[-600:]}")
    if not _cached(version, cache):
        raise RuntimeError(f"pip download sglang=={version} found nothing:\n" + "\n".join(errors))
    return _cached(version, cache)


def unpack(archive: str, dest: str) -> Tuple[str, str]:
    """Extract the ``.py`` files and the metadata of ``archive``; (source root, metadata text)."""
    metadata = ""
    if archive.endswith(".whl"):
        with zipfile.ZipFile(archive) as z:
            for name in z.namelist():
                if name.endswith(".py"):
                    z.extract(name, dest)
                elif re.fullmatch(r"[^/]+\.dist-info/METADATA", name):
                    metadata = z.read(name).decode("utf-8", "replace")
        return dest, metadata
    with tarfile.open(archive) as t:
        members = [m for m in t.getmembers() if m.isfile() and (
            m.name.endswith((".py", "/PKG-INFO", "/pyproject.toml")))]
        t.extractall(dest, members=members, filter="data")
    inits = sorted(glob.glob(os.path.join(dest, "**", "sglang", "__init__.py"), recursive=True), key=len)
    if not inits:
        raise RuntimeError(f"no sglang/__init__.py in {archive}")
    root = os.path.dirname(os.path.dirname(inits[0]))
    pkg_info = sorted(glob.glob(os.path.join(dest, "*", "PKG-INFO")))
    if pkg_info:
        metadata = open(pkg_info[0], encoding="utf-8").read()
    if "Requires-Dist" not in metadata:  # old sdists: the pins live in pyproject.toml only
        import tomllib
        for pyproject in sorted(glob.glob(os.path.join(dest, "**", "pyproject.toml"), recursive=True), key=len):
            deps = tomllib.load(open(pyproject, "rb")).get("project", {}).get("dependencies", [])
            metadata += "".join(f"Requires-Dist: {d}\n" for d in deps)
    return root, metadata


def read_pins(metadata: str) -> Dict[str, str]:
    """{package: requirement} for the packages in ``PINNED`` (unconditional Requires-Dist lines only)."""
    pins = {}
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        if "extra ==" in req:
            continue
        m = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)", req)
        name = re.sub(r"[-_.]+", "-", m.group(1)).lower()
        if name in PINNED:
            pins[name] = m.group(3).split(";")[0].strip().strip("()") or "(any)"
    return pins


def scan_release(version: str, cache: str, symbols: Sequence, workdir: str,
                 baseline_root: Optional[str] = None) -> Tuple[dict, str]:
    """(report of one release, the root of its unpacked source under ``workdir``)."""
    archive = fetch_release(version, cache)
    root, metadata = unpack(archive, os.path.join(workdir, version))
    symbols = [sym for sym in symbols if compat.applies(sym, version)]  # another family's entries: not expected
    results = analyse(root, symbols, baseline_root, packages=["sglang"])
    return {"archive": os.path.basename(archive), "pins": read_pins(metadata), "counts": counts(results),
            "symbols": results}, root


# ---- the CPU suite against a release (--run-suite) ------------------------------------------------
# A throw-away venv under /tmp: its own site-packages holds the release's sglang wheel (--no-deps) and
# our wheel, built from a `git archive` of HEAD; a .pth line puts the base venv's site-packages (torch,
# transformers, pytest, ...) AFTER it, so the release shadows the base's sglang and everything else is
# the base's, whatever the release pins. The base venv is read, never written.
SUITE_PYTEST = ("-m", "not gpu", "-q", "-rfE", "-p", "no:cacheprovider")
_SUMMARY_WORDS = ("failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "error", "errors",
                  "warning", "warnings")
# Causes we know, matched (re.search) against a failure's error lines and traceback: (name, regex, what).
# Filled from the tracebacks of the recorded runs; anything unmatched is grouped by its error line.
CAUSES: Tuple[Tuple[str, str, str], ...] = (
    ("0.5.20+: ServerArgs is a msgspec struct", r"readonly attribute",
     "server_args.py's DDTreeServerArgs (a @dataclass subclass of ServerArgs) fails at import (dataclasses sets "
     "__match_args__ on the struct): register() raises, so DDTREE, its flags and its hooks are absent"),
    ("compat entries that do not resolve", r"do not resolve|test_installed_sglang_reads_all_ok|"
     r"test_the_doctor_leaves_only_sgl_kernel_unchecked",
     "compat.py's symbol list against the installed release (the static scan's missing / moved entries)"),
    ("cascade: DDTREE not registered (after the msgspec ServerArgs break)",
     r"Unknown speculative algorithm name: (DDTREE|ddtree)|Unexpected keyword argument 'speculative_ddtree|"
     r"has no attribute 'speculative_ddtree|speculative-ddtree|DID NOT RAISE (SystemExit|ValueError)|"
     r"usage: sglang serve|SystemExit: 2|test_scheduler_sees_the_hook_after_plugin_loading",
     "flags, validation and the scheduler hook that register() would have installed"),
    ("0.5.17+: runtime context, 'spec' namespace", r"config namespace 'spec' not published",
     "upstream's SchedulerMetricsReporter.report_decode_stats / request meta info read get_spec(); "
     "test/worker/test_observability.py's stand-in scheduler publishes no ServerArgs (through worker/metrics.py)"),
    ("0.5.17+: runtime context in the upstream DFlash reference check",
     r"declared NS\('\w+'\) but absent from the published ServerArgs|config namespace 'parallel' not published",
     "test/reference/upstream_dflash_check.py publishes a partial ServerArgs (0.5.17: projected fields absent) / "
     "no 'parallel' namespace before initialize_model_parallel (0.5.23)"),
    ("by 0.5.23: SchedulerMetricsReporter.spec_num_correct_drafts gone", r"spec_num_correct_drafts",
     "worker/metrics.py's report_decode_stats wrapper reads it (upstream: num_correct_drafts -> num_generated_tokens)"),
    ("0.5.18+: upstream DFLASH request refusals gone", r"'NoneType' object has no attribute 'startswith'",
     "dflash_utils.validate_dflash_request now refuses only return_hidden_states with overlap; the tests expect "
     "upstream's DFLASH logprob refusal that worker/request_checks.py passes through"),
    ("by 0.5.23: trtllm_mha_page_table moved", r"No module named 'sglang\.kernels\.ops\.kvcache\.trtllm_mha_page_table",
     "worker/fa3_tree.py imports sglang.kernels.ops.kvcache.trtllm_mha_page_table; now "
     "sglang.kernels.ops.attention.trtllm_mha_page_table"),
    ("artefact: version gate lifted", r"test_supported_range_is_stated_once|"
     r"test_unsupported_sglang_version_is_a_clear_runtime_error|test_sglang_outside_the_range_fails_with_the_fix",
     "tests of version.py's range itself, which --run-suite raises in its snapshot (not a break)"),
    ("artefact: wheel built in the snapshot", r"the wheel build must not write into the checkout",
     "--run-suite built our wheel inside its snapshot and left build/ there (fixed: it now removes it)"),
    ("not version-related: ancestor_bits_kernel has no offline-compile case",
     r"ancestor_bits_kernel: no specialisation listed|test_every_kernel_needs_a_listed_specialisation",
     "the tested commit's scripts/dev/compile_kernels_offline.py lacked fa3's fused kernels (added in d0049f1)"),
    ("not version-related: a wall-clock ratio on a loaded machine", r"test_sweep_end_to_end",
     "test/benchmark/test_bench_serving.py's fake-server throughput ratio (1.26 vs > 1.3) while 4 suites shared 2 cores"),
)


def parse_pytest_summary(text: str) -> Dict[str, int]:
    """Counts from pytest's closing line ("== 2 failed, 10 passed, 1 skipped, 3 errors in 9.1s ==", or
    the -q form without the bars): {"failed": 2, "passed": 10, "skipped": 1, "error": 3}; {} when the
    output has none (pytest died before it). "errors" / "warnings" are counted as "error" / "warning"."""
    for line in reversed(text.splitlines()):
        body = line.strip().strip("=").strip()
        m = re.fullmatch(r"(.*?)\s+in\s+[\d.]+s(?:\s+\([^)]*\))?", body)
        if not m:
            continue
        parts = [p.strip() for p in m.group(1).split(",")]
        found = [re.fullmatch(r"(\d+)\s+(\w+)", p) for p in parts]
        if parts and all(f and f.group(2) in _SUMMARY_WORDS for f in found):
            out: Dict[str, int] = {}
            for f in found:
                word = f.group(2).rstrip("s") if f.group(2) in ("errors", "warnings") else f.group(2)
                out[word] = out.get(word, 0) + int(f.group(1))
            return out
        if body.startswith("no tests ran"):
            return {}
    return {}


def _error_lines(text: str) -> List[str]:
    """The ``E   `` lines of a pytest traceback, without the prefix."""
    return [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ") or ln == "E"]


def _deepest_frame(text: str, package: str) -> Optional[str]:
    """``package/sub/mod.py:LINE`` of the last traceback frame inside ``package`` (a site-packages or a
    checkout path; pytest's ``path.py:LINE`` or Python's ``File "path.py", line LINE``), or None."""
    hits = re.findall(rf"(?:^|[/\s\"]){re.escape(package)}/([\w/]+\.py)(?::(\d+)|\", line (\d+))", text, re.M)
    return f"{package}/{hits[-1][0]}:{hits[-1][1] or hits[-1][2]}" if hits else None


def parse_junit(xml_text: str, head_lines: int = 12) -> List[dict]:
    """One entry per failed / errored test case of a ``--junitxml`` report (``-o junit_family=xunit1``,
    which records the file): test id, outcome, pytest's message, the error lines (first ``head_lines``),
    and the deepest frame in sglang_ddtree and in sglang."""
    import xml.etree.ElementTree as ET

    out = []
    for case in ET.fromstring(xml_text).iter("testcase"):
        for outcome in ("failure", "error"):
            el = case.find(outcome)
            if el is None:
                continue
            text = el.text or ""
            classname, name = case.get("classname", ""), case.get("name", "")
            path = case.get("file") or classname.replace(".", "/") + ".py"
            cls = classname.rpartition(".")[2]
            test_id = f"{path}::{cls}::{name}" if cls and cls[0].isupper() else f"{path}::{name}"
            errors = _error_lines(text)
            message = (el.get("message") or "").strip().splitlines()[0][:300] if el.get("message") else ""
            out.append({"test": test_id, "outcome": "failed" if outcome == "failure" else "error",
                        "message": message, "root_error": root_error(text, message),
                        "error_lines": errors[:head_lines] or text.strip().splitlines()[-head_lines:],
                        "ours": _deepest_frame(text, "sglang_ddtree"), "upstream": _deepest_frame(text, "sglang")})
    return out


_EXC_LINE = re.compile(r"^(?:E\s)?\s*(?:\[rank\d+\]:\s*)?((?:\w+\.)*\w*(?:Error|Exception|Exit)\b(?::.*)?)$", re.M)


def root_error(text: str, message: str = "") -> str:
    """The exception a failure comes down to: the last exception line of its traceback that is not an
    AssertionError (a test that asserts on a subprocess's stderr shows the child's error there), else
    its first AssertionError line, else pytest's message."""
    found = [m.strip() for m in _EXC_LINE.findall(text)]
    others = [ln for ln in found if not ln.startswith("AssertionError")]
    return (others[-1] if others else found[0] if found else message or "")[:300]


def _error_key(failure: dict) -> str:
    """What a failure says, with its numbers, addresses and /tmp paths blurred: one cause, one key."""
    line = failure.get("root_error") or failure["message"] or (failure["error_lines"] or [""])[-1]
    return re.sub(r"0x[0-9a-f]+|\d+", "N", re.sub(r"/tmp/\S+?/site-packages/", "", line))[:200]


def classify(failures: Sequence[dict], causes: Sequence[Tuple[str, str, str]] = CAUSES) -> List[dict]:
    """Group ``failures`` (``parse_junit`` entries): by the first of ``causes`` whose regex matches a
    failure's message, error lines or frames, else by its blurred error line. Largest group first; each
    lists its tests and our modules (the deepest sglang_ddtree frame) it goes through."""
    groups: Dict[str, dict] = {}
    for f in failures:
        hay = "\n".join([f["test"], f["message"], f.get("root_error", ""), *f["error_lines"], f["ours"] or "",
                         f["upstream"] or ""])
        cause = next(((n, what) for n, rx, what in causes if re.search(rx, hay)), None)
        key = cause[0] if cause else "unclassified: " + _error_key(f)
        g = groups.setdefault(key, {"cause": key, "what": cause[1] if cause else "", "count": 0,
                                    "our_modules": [], "upstream_frames": [], "tests": [], "example": f["error_lines"][:6]})
        g["count"] += 1
        g["tests"].append(f["test"])
        mod = (f["ours"] or "").rpartition(":")[0]
        if mod and mod not in g["our_modules"]:
            g["our_modules"].append(mod)
        up = (f["upstream"] or "").rpartition(":")[0]
        if up and up not in g["upstream_frames"]:
            g["upstream_frames"].append(up)
    return sorted(groups.values(), key=lambda g: -g["count"])


def lift_version_gate(version_py: str, version: str) -> str:
    """``version.py``'s text with SUPPORTED_SGLANG_MAX_EXCLUSIVE raised just past ``version`` (the next
    patch release: 0.5.17.post1 -> 0.5.18), so that the plugin loads on that release and the suite shows what
    breaks past the gate; unchanged when ``version`` is already inside the range (a supported release)."""
    from packaging.version import Version

    current = re.search(r'^SUPPORTED_SGLANG_MAX_EXCLUSIVE = "([^"]+)"', version_py, re.M)
    assert current, "version.py has no SUPPORTED_SGLANG_MAX_EXCLUSIVE line"
    if Version(version) < Version(current.group(1)):
        return version_py
    release = list(Version(version).release) + [0] * 3
    nxt = f"{release[0]}.{release[1]}.{release[2] + 1}"
    new, n = re.subn(r'^SUPPORTED_SGLANG_MAX_EXCLUSIVE = "[^"]+"', f'SUPPORTED_SGLANG_MAX_EXCLUSIVE = "{nxt}"',
                     version_py, flags=re.M)
    assert n == 1, "version.py has no SUPPORTED_SGLANG_MAX_EXCLUSIVE line"
    return new


def requirements(metadata: str) -> List[str]:
    """The unconditional Requires-Dist requirements of a release's METADATA."""
    return [ln.split(":", 1)[1].strip() for ln in metadata.splitlines()
            if ln.startswith("Requires-Dist:") and "extra ==" not in ln]


def compare_requirements(reqs: Sequence[str], installed: Dict[str, Optional[str]]) -> List[dict]:
    """{name, wants, have, ok} for each requirement against ``installed`` ({normalised name: version or
    None}); ``ok`` is None where the version cannot be compared."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    rows = []
    for text in reqs:
        try:
            req = Requirement(text)
        except Exception:
            continue
        if req.marker is not None and not req.marker.evaluate():
            continue
        name = canonicalize_name(req.name)
        have = installed.get(name)
        try:
            ok = have is not None and req.specifier.contains(have, prereleases=True)
        except Exception:
            ok = None
        rows.append({"name": name, "wants": str(req.specifier) or "(any)", "have": have, "ok": ok})
    return rows


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return proc


_PROBE = r"""
import importlib.metadata as md, json, sys
names = json.loads(sys.argv[1])
have = {}
for n in names:
    try:
        have[n] = md.version(n)
    except md.PackageNotFoundError:
        have[n] = None
import importlib.util as iu
files = {m: (iu.find_spec(m) or type("", (), {"origin": None})).origin for m in ("sglang", "sglang_ddtree", "torch")}
print(json.dumps({"installed": have, "files": files, "python": sys.version.split()[0]}))
"""


def make_suite_env(version: str, archive: str, base_python: str, workdir: str, lift_gate: bool,
                   rev: str = "HEAD") -> dict:
    """Build the throw-away venv and the source snapshot under ``workdir``; facts about it (commit,
    paths, the gate)."""
    src, venv, dist = (os.path.join(workdir, d) for d in ("src", "venv", "dist"))
    os.makedirs(src)
    commit = _run(["git", "-C", REPO, "rev-parse", "--verify", f"{rev}^{{commit}}"]).stdout.strip()
    tar = subprocess.Popen(["git", "-C", REPO, "archive", "--format=tar", commit], stdout=subprocess.PIPE)
    _run(["tar", "-x", "-C", src], stdin=tar.stdout)
    assert tar.wait() == 0, "git archive failed"
    gate = "kept (the plugin refuses this release)"
    if lift_gate:
        vpy = os.path.join(src, "python", "sglang_ddtree", "version.py")
        text = lift_version_gate(open(vpy).read(), version)
        open(vpy, "w").write(text)
        gate = "lifted in the snapshot: " + re.search(r"^SUPPORTED_SGLANG_MAX_EXCLUSIVE = .*$", text, re.M).group()
    base = json.loads(_run([base_python, "-c", "import sys, sysconfig, json; print(json.dumps([sys._base_executable, "
                            "sysconfig.get_paths()['purelib'], sysconfig.get_paths()['platlib']]))"]).stdout)
    _run([base[0], "-m", "venv", "--without-pip", venv])
    site = json.loads(_run([os.path.join(venv, "bin", "python"), "-c", "import sysconfig, json; "
                            "print(json.dumps(sysconfig.get_paths()['purelib']))"]).stdout)
    # A hard-linked copy of the base's site-packages: a reinstall in the base venv while the suite runs
    # (others use it) replaces files and so does not reach this copy. Its .pth files run (the torchvision
    # shim), except an editable install's, which would put a live checkout on the path.
    layers = []
    for i, path in enumerate(dict.fromkeys(base[1:])):
        copy = os.path.join(workdir, f"base-site{i}")
        try:
            _run(["cp", "-al", path, copy])
            for pth in glob.glob(os.path.join(copy, "__editable__*.pth")):
                os.remove(pth)
            layers.append(copy)
        except RuntimeError:  # another file system: the base itself, live
            layers.append(path)
    with open(os.path.join(site, "_base_site.pth"), "w") as f:
        f.write("".join(f"import site; site.addsitedir({p!r})\n" for p in layers))
    _run([base_python, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", dist, src])
    shutil.rmtree(os.path.join(src, "build"), ignore_errors=True)  # as setup_env.sh: the suite checks the
    for egg in glob.glob(os.path.join(src, "python", "*.egg-info")):  # checkout holds no build output
        shutil.rmtree(egg, ignore_errors=True)
    ours = glob.glob(os.path.join(dist, "sglang_ddtree-*.whl"))
    _run([base_python, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--disable-pip-version-check",
          "--target", site, archive, *ours])
    return {"workdir": workdir, "src": src, "venv": venv, "site": site, "commit": commit, "version_gate": gate,
            "base_python": base_python, "base_site": base[1], "layers": layers, "our_wheel": os.path.basename(ours[0])}


def run_suite(version: str, cache: str, base_python: str, lift_gate: bool = True, keep: bool = False,
              pytest_args: Sequence[str] = (), rev: str = "HEAD") -> dict:
    """The CPU suite of HEAD against ``version`` (see this section's comment): the environment, the
    release's pins against what that environment has, pytest's counts, each failure, and their causes."""
    archive = fetch_release(version, cache)
    with tempfile.TemporaryDirectory(prefix="meta-") as tmp:
        metadata = unpack_metadata(archive, tmp)
    workdir = tempfile.mkdtemp(prefix=f"sglang-suite-{version}-", dir="/tmp")
    try:
        env_facts = make_suite_env(version, archive, base_python, workdir, lift_gate, rev)
        py = os.path.join(env_facts["venv"], "bin", "python")
        reqs = requirements(metadata)
        from packaging.requirements import Requirement
        from packaging.utils import canonicalize_name
        names = sorted({canonicalize_name(Requirement(r).name) for r in reqs} | {"sglang", "sglang-ddtree"})
        probe = json.loads(_run([py, "-c", _PROBE, json.dumps(names)], cwd=workdir).stdout)
        rows = compare_requirements(reqs, probe["installed"])
        pins = {r["name"]: r for r in rows if r["name"] in PINNED}
        junit = os.path.join(workdir, "junit.xml")
        cmd = [py, "-m", "pytest", "test", *SUITE_PYTEST, f"--junitxml={junit}", "-o", "junit_family=xunit1",
               *pytest_args]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env.update(VIRTUAL_ENV=env_facts["venv"], PATH=os.path.join(env_facts["venv"], "bin") + os.pathsep + env["PATH"])
        t0 = time.time()
        with open(os.path.join(workdir, "pytest.log"), "w") as log:
            rc = subprocess.run(cmd, cwd=env_facts["src"], stdout=log, stderr=subprocess.STDOUT, env=env).returncode
        wall = time.time() - t0
        text = open(os.path.join(workdir, "pytest.log"), encoding="utf-8", errors="replace").read()
        failures = parse_junit(open(junit, encoding="utf-8").read()) if os.path.exists(junit) else []
        result = {
            "sglang": version, "archive": os.path.basename(archive), "date": datetime.date.today().isoformat(),
            "commit": env_facts["commit"], "version_gate": env_facts["version_gate"],
            "environment": {"how": "python -m venv --without-pip under /tmp; its site-packages: the release's wheel "
                                   "and ours (pip install --no-deps --target); after it, by a .pth line, a hard-linked "
                                   "copy of the base venv's site-packages (less its editable-install .pth) for every "
                                   "other package",
                            "base_python": base_python, "base_site": env_facts["base_site"],
                            "base_layers": env_facts["layers"],
                            "python": probe["python"], "imported_from": probe["files"],
                            "our_wheel": env_facts["our_wheel"]},
            "pins": pins,
            "pin_mismatches": sorted(n for n, r in pins.items() if not r["ok"]),
            "requirements_absent": sorted(r["name"] for r in rows if r["have"] is None and r["name"] not in PINNED),
            "requirements_other_version": [r for r in rows if r["have"] is not None and not r["ok"]
                                           and r["name"] not in PINNED],
            "pytest": {"command": " ".join(["python", "-m", "pytest", "test", *SUITE_PYTEST, *pytest_args]),
                       "rc": rc, "wall_s": round(wall, 1), "counts": parse_pytest_summary(text),
                       "closing_line": next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")},
            "failure_classes": classify(failures),
            "failures": failures,
        }
        if not failures and rc not in (0, 5):
            result["pytest"]["log_tail"] = text.splitlines()[-40:]
        return result
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def unpack_metadata(archive: str, tmp: str) -> str:
    """The METADATA text of a release archive (a wheel's dist-info, or what ``unpack`` reads)."""
    if archive.endswith(".whl"):
        with zipfile.ZipFile(archive) as z:
            name = next(n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
            return z.read(name).decode("utf-8", "replace")
    return unpack(archive, tmp)[1]


def suite_summary(result: dict) -> str:
    c, p = result["pytest"]["counts"], result["pins"]
    pins = ", ".join(f"{n} wants {r['wants']} has {r['have']}" + ("" if r["ok"] else " (MISMATCH)")
                     for n, r in sorted(p.items()))
    lines = [f"{result['sglang']}  suite rc {result['pytest']['rc']}  "
             + "  ".join(f"{k} {v}" for k, v in c.items()) + f"  [{pins}]"]
    for g in result["failure_classes"]:
        lines.append(f"    {g['count']:>4}  {g['cause']}  ({', '.join(g['our_modules'][:4]) or 'no frame of ours'})")
    return "\n".join(lines)


# ---- report ---------------------------------------------------------------------------------------
def _describe(r: dict) -> str:
    if r["status"] == MOVED:
        others = [c for c in r.get("candidates", []) if c != r["moved_to"]]
        return f"-> {r['moved_to']} ({r.get('at', '')})" + (f"; also {', '.join(others)}" if others else "")
    if r["status"] == CHANGED:
        where = f" at {r['moved_to']}" if "moved_to" in r else ""
        return f"expected ({', '.join(r['expected'])}){where}; now ({', '.join(r['params'])})"
    new = r.get("new_on_owner", [])  # a rename shows here; a long list is only noise in the table
    new = f"; new on the owner since the baseline: {', '.join(new)}" if 0 < len(new) <= 6 else ""
    return r.get("detail", "") + new


def summary(report: dict) -> str:
    lines = []
    for version, rel in report["releases"].items():
        pins = ", ".join(f"{k} {v}" for k, v in sorted(rel["pins"].items()))
        c = rel["counts"]
        lines.append(f"{version}  [{pins}]  ok {c[OK]}  moved {c[MOVED]}  missing {c[MISSING]}  "
                     f"changed {c[CHANGED]}  not-checked {c[UNCHECKED]}")
        for r in rel["symbols"]:
            if r["status"] not in (OK, UNCHECKED):
                lines.append(f"    {r['status']:<17} {r['path']}  {_describe(r)}")
        for path, note in rel.get("signature_notes", {}).items():
            added = [n + (" (required)" if n in note["added_required"] else "") for n in note["added"]]
            added = added if len(added) <= 8 else added[:8] + [f"... {len(added) - 8} more"]
            lines.append(f"    params-differ     {path}  +[{', '.join(added)}] -[{', '.join(note['removed'])}]")
    return "\n".join(lines)


def to_json(obj, depth: int = 0) -> str:
    """JSON with one line per symbol entry (and per list of names): a diff of two scans reads by symbol."""
    flat = not isinstance(obj, (dict, list)) or "path" in obj or all(
        not isinstance(v, (dict, list)) for v in (obj.values() if isinstance(obj, dict) else obj))
    if flat or not obj:
        return json.dumps(obj)
    pad, end = " " * (depth + 1), " " * depth
    items = ([f"{json.dumps(k)}: {to_json(v, depth + 1)}" for k, v in obj.items()] if isinstance(obj, dict)
             else [to_json(v, depth + 1) for v in obj])
    o, c = "{}" if isinstance(obj, dict) else "[]"
    return o + "\n" + ",\n".join(pad + i for i in items) + "\n" + end + c


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("versions", nargs="*", help="SGLang releases, e.g. 0.5.16 0.5.17 (the first is the baseline "
                                                "for the parameter-list notes)")
    ap.add_argument("--out", help="write the JSON report here")
    ap.add_argument("--cache", default=DEFAULT_CACHE, help=f"where releases are downloaded (default {DEFAULT_CACHE})")
    ap.add_argument("--run-suite", action="store_true",
                    help="instead of the static scan: run the CPU suite (HEAD) against each release in a venv under "
                         "/tmp (the release's sglang + our wheel over the base venv's packages)")
    ap.add_argument("--suite-out", help="with --run-suite: write the result here ('{version}' is replaced; needed "
                                        "for more than one release)")
    ap.add_argument("--base-venv", default=os.path.join(REPO, ".venv"),
                    help="with --run-suite: the venv whose packages (torch, transformers, pytest ...) it uses, read only")
    ap.add_argument("--keep-version-gate", action="store_true",
                    help="with --run-suite: leave version.py's range as it is (the plugin then refuses the release)")
    ap.add_argument("--commit", default="HEAD", help="with --run-suite: the revision whose suite runs (default HEAD)")
    ap.add_argument("--keep-env", action="store_true", help="with --run-suite: keep the /tmp environment and log")
    ap.add_argument("--pytest-args", default="", help="with --run-suite: extra pytest arguments, one string")
    ap.add_argument("--reclassify", metavar="RESULT_JSON",
                    help="re-group a written --run-suite result's failures by the current CAUSES and rewrite it")
    ap.add_argument("--junit", help="with --reclassify: re-read the failures from this junit.xml (a --keep-env run's)")
    args = ap.parse_args(argv)
    command = "python scripts/check_upstream.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.reclassify:
        return _reclassify(args.reclassify, args.junit, command)
    if not args.versions:
        ap.error("give at least one release")
    if args.run_suite:
        return _main_suite(args, command)
    symbols = compat.symbols()
    report = {"command": command, "date": datetime.date.today().isoformat(), "symbols": len(symbols),
              "baseline": args.versions[0],
              "statuses": list(STATUSES), "releases": {}}
    with tempfile.TemporaryDirectory(prefix="sglang-releases-") as workdir:
        baseline_root = None
        for version in args.versions:
            rel, root = scan_release(version, args.cache, symbols, workdir, baseline_root)
            base = report["releases"].get(args.versions[0])
            rel["signature_notes"] = signature_notes(rel["symbols"], base["symbols"]) if base else {}
            report["releases"][version] = rel
            baseline_root = baseline_root or root
    for rel in report["releases"].values():
        _slim(rel["symbols"])
    print(summary(report))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(to_json(report) + "\n")
    return 0 if all(r["counts"][MISSING] + r["counts"][CHANGED] == 0 for r in report["releases"].values()) else 1


def _reclassify(path: str, junit: Optional[str], command: str) -> int:
    with open(path, encoding="utf-8") as f:
        result = json.load(f)
    if junit:
        result["failures"] = parse_junit(open(junit, encoding="utf-8").read())
    result["failure_classes"] = classify(result["failures"])
    result["reclassified"] = {"command": command, "date": datetime.date.today().isoformat()}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(suite_summary(result))
    return 0


def _main_suite(args, command: str) -> int:
    if len(args.versions) > 1 and args.suite_out and "{version}" not in args.suite_out:
        raise SystemExit("--suite-out needs '{version}' in it for more than one release")
    base_python = os.path.join(args.base_venv, "bin", "python")
    rc = 0
    for version in args.versions:
        result = dict(command=command, **run_suite(version, args.cache, base_python, not args.keep_version_gate,
                                                   args.keep_env, args.pytest_args.split(), args.commit))
        print(suite_summary(result))
        if args.suite_out:
            with open(args.suite_out.replace("{version}", version), "w", encoding="utf-8") as f:
                json.dump(result, f, indent=1)
                f.write("\n")
        rc |= result["pytest"]["rc"] != 0
    return int(rc)


if __name__ == "__main__":
    sys.exit(main())
