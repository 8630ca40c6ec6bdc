"""A release's source read with ``ast`` (no import: a release needs its own torch), and each symbol-list
entry checked against it: ok | moved | missing | signature-changed | not-checked (see ``check_upstream``)."""

from __future__ import annotations

import ast
import os
import re
import sys
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.path.join(REPO, "python") not in sys.path:
    sys.path.insert(0, os.path.join(REPO, "python"))
from sglang_ddtree import compat  # noqa: E402  (stdlib only: no SGLang import)

OK, MOVED, MISSING, CHANGED, UNCHECKED = "ok", "moved", "missing", "signature-changed", "not-checked"
STATUSES = (OK, MOVED, MISSING, CHANGED, UNCHECKED)
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
        members = {n for k in classes for n in set(_class_names(k.node)) | self.set_on_class(k)}
        fields = {n for k in classes + [c for k in classes for c in self.composed(k)] for n in _fields(k.node)}
        if kind == compat.MEMBER:
            return members
        if kind == compat.FIELD:
            return fields
        return members | fields | {n for k in classes for n in self.self_assigned(k)}  # INSTANCE

    def set_on_class(self, t: Target) -> set:
        """Class attributes its module sets after the class statement (``X.attr = ...``, as ServerArgs' ``_NS_BY_FIELD``
        since 0.5.20, which the rebuild then carries over through its namespace)."""
        mod, name = self.module(t.module), t.node.name
        return {tg.attr for stmt in mod.body if isinstance(stmt, ast.Assign) and stmt.lineno > t.node.lineno
                for tg in stmt.targets
                if isinstance(tg, ast.Attribute) and isinstance(tg.value, ast.Name) and tg.value.id == name}

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
