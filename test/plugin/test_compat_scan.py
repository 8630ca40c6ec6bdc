"""``sglang_ddtree.compat`` lists every upstream name the package touches, and each one resolves.

A static scan of the package's own source (``ast``, nothing imported; the list itself, ``compat/__init__.py``,
and its checker ``compat/resolve.py`` excluded; the release adapters ``compat/sglang_*.py`` included)
collects the upstream names it uses; every one must be on ``compat.UPSTREAM_SYMBOLS``. What counts:
  imports       ``import sglang.x`` / ``from sglang.x import a`` / ``from sgl_kernel import a``, also
                inside functions (lazy imports); ``a.<n>`` of such an imported name (enum members,
                ``HookRegistry.register``)
  strings       a string constant that is a whole dotted ``sglang.`` path (hook targets, logger names)
  subclasses    in a class whose base is an upstream class: ``self.<n>`` / ``cls.<n>`` /
                ``type(self).<n>`` that the class neither defines in its body nor assigns itself,
                and every ``super().<n>``; anywhere, ``Ours.<n>`` and ``Ours(<n>=...)`` for such <n>
                (listed as ``<base path>.<n>``)
  typed names   attributes of a variable (or attribute) named ``server_args``, ``batch`` or ``req``
                (upstream ``ServerArgs``, ``ScheduleBatch``, ``Req``), including constant
                ``getattr``/``hasattr``/``setattr`` names, except names our subclass of that class defines
  calls         keyword names passed to an imported upstream callable (or an attribute of one), to
                ``self.<upstream method>`` or ``super().<n>`` (listed as a PARAMS entry)
Then, against the installed SGLang: a name a subclass defines or assigns that upstream ALSO has (an
override, or a write to an upstream attribute) must be listed too, and every listed entry resolves.
Not seen by the scan (listed by hand): attributes of other upstream objects reached through plain
variables (``reporter.``, ``runner.``, ``logits_output.``, ``info.`` ...).
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Set, Tuple

import pytest

import sglang_ddtree
from sglang_ddtree import compat

PACKAGE_DIR = os.path.dirname(os.path.abspath(sglang_ddtree.__file__))

UPSTREAM_ROOTS = ("sglang", "sgl_kernel")
_DOTTED = re.compile(r"^sglang(\.[A-Za-z_][A-Za-z0-9_]*)+$")
# Variable (or attribute) names whose attributes are upstream attributes of one class.
TYPED_NAMES = {
    "server_args": "sglang.srt.server_args.ServerArgs",
    "batch": "sglang.srt.managers.schedule_batch.ScheduleBatch",
    "req": "sglang.srt.managers.schedule_batch.Req",
}
_SELF_NAMES = ("self", "cls")
_ATTR_FUNCS = ("getattr", "hasattr", "setattr")


@dataclass(frozen=True)
class Use:
    path: str  # dotted upstream path, e.g. sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2.block_size
    where: str  # file:line
    rule: str  # imports / strings / subclasses / typed names / calls


@dataclass
class Subclass:
    name: str
    base: str  # dotted upstream path of the base class
    where: str
    own: Set[str]  # names the class body defines or its methods assign on self


def _is_upstream(module: Optional[str]) -> bool:
    return module is not None and module.split(".")[0] in UPSTREAM_ROOTS


def _self_receiver(node: ast.AST) -> bool:
    """``self`` / ``cls`` / ``type(self)``."""
    if isinstance(node, ast.Name):
        return node.id in _SELF_NAMES
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type"
            and len(node.args) == 1 and _self_receiver(node.args[0]))


def _is_super_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _typed_receiver(node: ast.AST) -> Optional[str]:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return TYPED_NAMES.get(name)


def _const_str(node: ast.AST) -> Optional[str]:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _store_targets(node: ast.AST) -> Iterable[ast.AST]:
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    else:
        return ()
    out = []
    for t in targets:
        out.extend(t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])
    return out


class _Module:
    def __init__(self, source: str, rel: str):
        self.rel = rel
        self.tree = ast.parse(source, filename=rel)
        self.bindings: Dict[str, str] = {}  # local name -> upstream dotted path (module-level + lazy)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and _is_upstream(node.module):
                for alias in node.names:
                    self.bindings[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if _is_upstream(alias.name) and alias.asname:
                        self.bindings[alias.asname] = alias.name

    def at(self, node: ast.AST) -> str:
        return f"{self.rel}:{getattr(node, 'lineno', 0)}"

    def subclasses(self) -> List[Subclass]:
        out = []
        for node in ast.walk(self.tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = [self.bindings.get(b.id) for b in node.bases if isinstance(b, ast.Name)]
            bases = [b for b in bases if b is not None]
            if not bases:
                continue
            assert len(bases) == 1, f"{self.at(node)}: more than one upstream base; teach the scan"
            out.append(Subclass(node.name, bases[0], self.at(node), _own_names(node)))
        return out


def _own_names(cls: ast.ClassDef) -> Set[str]:
    own = set()
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(stmt.name)
        for t in _store_targets(stmt):
            if isinstance(t, ast.Name):
                own.add(t.id)
    for node in ast.walk(cls):
        for t in _store_targets(node):
            if isinstance(t, ast.Attribute) and _self_receiver(t.value):
                own.add(t.attr)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                and len(node.args) >= 2 and _self_receiver(node.args[0]) and _const_str(node.args[1])):
            own.add(_const_str(node.args[1]))
    return own


def _enclosing_subclass(mod: "_Module", node: ast.AST, subclasses: Dict[str, Subclass]) -> Optional[Subclass]:
    for cls in ast.walk(mod.tree):
        if (isinstance(cls, ast.ClassDef) and cls.name in subclasses
                and subclasses[cls.name].where == mod.at(cls) and any(n is node for n in ast.walk(cls))):
            return subclasses[cls.name]
    return None


def _upstream_callee(func: ast.AST, mod: "_Module", subclasses: Dict[str, Subclass]) -> Optional[str]:
    """Dotted upstream path of a called expression, when the scan can tell: an imported upstream name,
    an attribute of one, or ``self.<upstream member>`` / ``super().<n>`` in our subclasses."""
    if isinstance(func, ast.Name):
        return mod.bindings.get(func.id)
    if not isinstance(func, ast.Attribute):
        return None
    if isinstance(func.value, ast.Name) and func.value.id in mod.bindings:
        return f"{mod.bindings[func.value.id]}.{func.attr}"
    if _self_receiver(func.value) or _is_super_call(func.value):
        sub = _enclosing_subclass(mod, func, subclasses)
        if sub is not None and (_is_super_call(func.value) or func.attr not in sub.own):
            return f"{sub.base}.{func.attr}"
    return None


def _uses_in_module(mod: _Module, subclasses: Dict[str, Subclass], typed_own: Dict[str, Set[str]]) -> List[Use]:
    uses: List[Use] = []

    def add(path, node, rule):
        uses.append(Use(path, mod.at(node), rule))

    # imports and dotted strings
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _is_upstream(node.module):
            for alias in node.names:
                add(f"{node.module}.{alias.name}", node, "imports")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _is_upstream(alias.name):
                    add(alias.name, node, "imports")
        elif _const_str(node) is not None and _DOTTED.match(_const_str(node)):
            add(_const_str(node), node, "strings")

    # attributes of imported upstream names (CaptureHiddenMode.FULL, HookRegistry.register)
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in mod.bindings:
            add(f"{mod.bindings[node.value.id]}.{node.attr}", node, "imports")

    # keyword arguments of calls to upstream callables: "callee(name)"
    for node in ast.walk(mod.tree):
        if not isinstance(node, ast.Call):
            continue
        callee = _upstream_callee(node.func, mod, subclasses)
        if callee is not None:
            for kw in node.keywords:
                if kw.arg is not None:
                    add(f"{callee}({kw.arg})", node, "calls")

    # self.<n> inside our upstream subclasses
    for cls in ast.walk(mod.tree):
        if not (isinstance(cls, ast.ClassDef) and cls.name in subclasses and subclasses[cls.name].where == mod.at(cls)):
            continue
        sub = subclasses[cls.name]
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and _self_receiver(node.value) and node.attr not in sub.own:
                add(f"{sub.base}.{node.attr}", node, "subclasses")
            elif isinstance(node, ast.Attribute) and _is_super_call(node.value):
                add(f"{sub.base}.{node.attr}", node, "subclasses")

    # Ours.<n>, Ours(<n>=...) anywhere; typed names
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in subclasses:
            sub = subclasses[node.value.id]
            if node.attr not in sub.own:
                add(f"{sub.base}.{node.attr}", node, "subclasses")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in subclasses:
            sub = subclasses[node.func.id]
            for kw in node.keywords:
                if kw.arg is not None and kw.arg not in sub.own:
                    add(f"{sub.base}.{kw.arg}", node, "subclasses")
        owner = name = None
        if isinstance(node, ast.Attribute):
            owner, name = _typed_receiver(node.value), node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _ATTR_FUNCS
              and len(node.args) >= 2):
            owner, name = _typed_receiver(node.args[0]), _const_str(node.args[1])
        if owner is not None and name is not None and name not in typed_own.get(owner, ()):
            add(f"{owner}.{name}", node, "typed names")
    return uses


def _package_sources(root: str = PACKAGE_DIR) -> Dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith(".py"):
                path = os.path.join(dirpath, fn)
                with open(path, encoding="utf-8") as f:
                    out[os.path.relpath(path, os.path.dirname(root))] = f.read()
    return out


def scan(sources: Dict[str, str]) -> Tuple[List[Use], Dict[str, Subclass]]:
    """Every upstream use in ``sources`` ({relative path: source text}) and our upstream subclasses."""
    modules = [_Module(src, rel) for rel, src in sources.items()]
    subclasses: Dict[str, Subclass] = {}
    for mod in modules:
        for sub in mod.subclasses():
            assert sub.name not in subclasses, f"two upstream subclasses named {sub.name}; teach the scan"
            subclasses[sub.name] = sub
    typed_own: Dict[str, Set[str]] = {}
    for sub in subclasses.values():
        typed_own.setdefault(sub.base, set()).update(sub.own)
    uses = []
    for mod in modules:
        uses.extend(_uses_in_module(mod, subclasses, typed_own))
    return uses, subclasses


def unlisted(uses: Iterable[Use], listed: Iterable[str]) -> Dict[str, List[str]]:
    """{path: [where, ...]} of the uses whose path is not on the list."""
    listed = set(listed)
    out: Dict[str, List[str]] = {}
    for use in uses:
        if use.path not in listed:
            out.setdefault(use.path, []).append(f"{use.where} ({use.rule})")
    return out




def listed_names(symbols=None) -> Set[str]:
    """The paths the scan compares against: each entry's path; a PARAMS entry gives ``callee(name)``
    for each of its names."""
    out = set()
    for sym in compat.symbols() if symbols is None else [compat.Symbol(*e) for e in symbols]:
        if sym.kind == compat.PARAMS:
            callee, _, names = sym.path.partition("(")
            out.update(f"{callee}({n.strip()})" for n in names.rstrip(")").split(",") if n.strip())
        else:
            out.add(sym.path)
    return out


def _scan_package():
    sources = _package_sources()
    for own in ("__init__.py", "resolve.py"):  # the list itself and its checker
        sources.pop(os.path.join("sglang_ddtree", "compat", own))
    return scan(sources)


def _report(found: Dict[str, List[str]]) -> str:
    return "\n".join(f"  {path}  <- {', '.join(where[:3])}" for path, where in sorted(found.items()))


# ---- the list is complete --------------------------------------------------------------------------
def test_every_upstream_name_the_package_uses_is_listed():
    uses, subclasses = _scan_package()
    assert {"DDTreeWorker", "DDTreeDraftInput", "DDTreeVerifyInput", "DDTreeSpecAlgo",
            "DDTreeServerArgs"} <= set(subclasses), sorted(subclasses)
    assert len(uses) > 200  # the scan sees the package (a broken scan finds nothing and passes)
    missing = unlisted(uses, listed_names())
    assert not missing, ("upstream names used by sglang_ddtree but not on sglang_ddtree.compat."
                         f"UPSTREAM_SYMBOLS (add each with its kind and purpose):\n{_report(missing)}")


def test_every_override_and_write_of_an_upstream_name_is_listed():
    """A name our subclass defines or assigns that upstream also has: an override (renamed upstream,
    it silently stops being called) or a write to an upstream attribute (renamed, it silently stops
    being read). Needs the installed SGLang to tell ours from theirs."""
    pytest.importorskip("sglang")
    _, subclasses = _scan_package()
    listed = listed_names()
    missing = {}
    for sub in subclasses.values():
        base = compat.resolve(sub.base)
        for name in sorted(sub.own):
            if hasattr(object, name) and f"{sub.base}.{name}" not in listed:
                continue  # __init__ / __repr__: every class has them; list one by hand where it matters
            if compat.upstream_has(base, name) and f"{sub.base}.{name}" not in listed:
                missing[f"{sub.base}.{name}"] = [f"{sub.where} ({sub.name})"]
    assert not missing, f"overrides / writes of upstream names not on the compat list:\n{_report(missing)}"


def test_hook_targets_are_listed():
    from sglang_ddtree.worker.hooks import HOOK_TARGETS

    attrs = {sym.path for sym in compat.symbols() if sym.kind == compat.ATTR}
    assert set(HOOK_TARGETS) <= attrs, sorted(set(HOOK_TARGETS) - attrs)


def test_the_list_is_well_formed():
    paths = [sym.path for sym in compat.symbols()]
    dupes = sorted({p for p in paths if paths.count(p) > 1})
    assert not dupes, dupes
    for sym in compat.symbols():
        assert sym.kind in compat.KINDS, sym
        assert sym.purpose.strip(), sym
        assert sym.path.split(".")[0] in UPSTREAM_ROOTS, sym
        assert ("(" in sym.path) == (sym.kind == compat.PARAMS), sym
    from packaging.specifiers import SpecifierSet

    from sglang_ddtree.version import SUPPORT_MATRIX

    known = list(SUPPORT_MATRIX) + [f.first for f in compat.FAMILIES]
    for sym in compat.symbols():  # a family's entry names a release the matrix or an adapter has (no dead entries)
        if sym.releases:
            assert any(SpecifierSet(sym.releases).contains(r) for r in known), sym


# ---- every entry resolves against the installed SGLang ---------------------------------------------
def _entries(in_sgl_kernel: bool):
    """The installed release's entries (``compat.symbols_for``: another family's are not expected here)."""
    from importlib.metadata import version

    return [sym for sym in compat.symbols_for(version("sglang"))
            if (compat.needed_package(sym) == "sgl_kernel") == in_sgl_kernel]


def _failures(entries):
    failures = []
    for sym in entries:
        try:
            compat.check_symbol(sym)
        except Exception as e:
            failures.append(f"  {sym.path} [{sym.kind}] ({sym.purpose}): {type(e).__name__}: {e}")
    return failures


def test_every_sglang_entry_resolves():
    """All but the sgl_kernel entries resolve on a CPU-only machine (SGLang imports its GPU modules
    without CUDA); the entries of upstream modules that import sgl_kernel (``compat.MODULES_NEEDING``)
    count as sgl_kernel entries."""
    pytest.importorskip("sglang")
    failures = _failures(_entries(in_sgl_kernel=False))
    assert not failures, "compat entries that do not resolve against the installed SGLang:\n" + "\n".join(failures)


def test_every_sgl_kernel_entry_resolves():
    """sgl_kernel is a CUDA-only wheel, absent from CPU environments: skipped there, checked where it is
    installed (the doctor's upstream-symbols check reports them as not checked without it)."""
    pytest.importorskip("sgl_kernel", reason="sgl_kernel (CUDA-only wheel) is not installed")
    failures = _failures(_entries(in_sgl_kernel=True))
    assert not failures, "\n".join(failures)


def test_the_doctor_leaves_only_sgl_kernel_unchecked():
    unchecked = compat.unchecked_upstream_symbols()
    needing = tuple(m + "." for m, p in compat.MODULES_NEEDING.items() if p == "sgl_kernel")
    assert all(path.startswith(("sgl_kernel.",) + needing) for path, _, _ in unchecked), unchecked
    assert not compat.missing_upstream_symbols()


# ---- the checks fail where they should --------------------------------------------------------------
_SYNTHETIC = {
    "pkg/mod.py": '''
from sglang.srt.fake.mod import Base, helper, Mode
import sglang.srt.fake.other

TARGET = "sglang.srt.fake.hooks.target_fn"
NOT_A_PATH = "see sglang.srt.fake.docs for details"


class Ours(Base):
    mine: int = 0

    def own_method(self):
        self.assigned = 1
        return self.assigned + self.mine + self.own_method.__name__.count("x")

    def uses(self, server_args, batch):
        self.upstream_attr
        self._upstream_private_method(k=1)
        super().upstream_hook()
        type(self).upstream_class_attr
        server_args.some_field, getattr(server_args, "other_field", None), batch.seq_lens_cpu
        server_args.mine_in_subclass  # not ours: Ours subclasses Base, not ServerArgs
        return Mode.FULL, helper(width=3)


def lazy(req):
    from sgl_kernel import fast_kernel
    from sglang.srt.fake.late import late_fn

    Ours.upstream_classmethod()
    Ours(mine=1, base_field=2)
    return fast_kernel, late_fn, req.kv_committed_len
''',
}


def test_the_scan_names_every_unlisted_upstream_use():
    uses, subclasses = scan(_SYNTHETIC)
    assert subclasses["Ours"].base == "sglang.srt.fake.mod.Base"
    found = unlisted(uses, listed=set())
    assert set(found) == {
        "sglang.srt.fake.mod.Base", "sglang.srt.fake.mod.helper", "sglang.srt.fake.mod.Mode",
        "sglang.srt.fake.other", "sglang.srt.fake.hooks.target_fn", "sgl_kernel.fast_kernel",
        "sglang.srt.fake.late.late_fn", "sglang.srt.fake.mod.Mode.FULL", "sglang.srt.fake.mod.helper(width)",
        "sglang.srt.fake.mod.Base.upstream_attr", "sglang.srt.fake.mod.Base._upstream_private_method",
        "sglang.srt.fake.mod.Base._upstream_private_method(k)", "sglang.srt.fake.mod.Base.upstream_hook",
        "sglang.srt.fake.mod.Base.upstream_class_attr", "sglang.srt.fake.mod.Base.upstream_classmethod",
        "sglang.srt.fake.mod.Base.base_field",
        "sglang.srt.server_args.ServerArgs.some_field", "sglang.srt.server_args.ServerArgs.other_field",
        "sglang.srt.server_args.ServerArgs.mine_in_subclass",
        "sglang.srt.managers.schedule_batch.ScheduleBatch.seq_lens_cpu",
        "sglang.srt.managers.schedule_batch.Req.kv_committed_len",
    }, sorted(found)
    assert found["sglang.srt.fake.mod.Base.upstream_attr"] == ["pkg/mod.py:17 (subclasses)"]
    # listing a name silences it; a PARAMS entry covers the keyword names it lists
    listed = listed_names([("sglang.srt.fake.mod.Base.upstream_attr", "t", compat.INSTANCE),
                           ("sglang.srt.fake.mod.helper(width)", "t", compat.PARAMS)])
    rest = unlisted(uses, listed)
    assert "sglang.srt.fake.mod.Base.upstream_attr" not in rest and "sglang.srt.fake.mod.helper(width)" not in rest
    assert len(rest) == len(found) - 2


def test_the_scan_knows_our_own_names():
    src = {"pkg/m.py": '''
from sglang.srt.server_args import ServerArgs


class OurArgs(ServerArgs):
    our_flag: int = 0

    def __post_init__(self):
        self._our_note = self.our_flag
        super().__post_init__()


def read(server_args):
    return server_args.our_flag, server_args._our_note
'''}
    uses, _ = scan(src)
    assert set(unlisted(uses, set())) == {"sglang.srt.server_args.ServerArgs",
                                          "sglang.srt.server_args.ServerArgs.__post_init__"}


@pytest.mark.parametrize("kind, path, error", [
    (compat.MODULE, "sglang.srt.managers.no_such_module", "ModuleNotFoundError"),
    (compat.MODULE, "sglang.srt.no_such_package.module", "ModuleNotFoundError"),
    (compat.ATTR, "sglang.srt.server_args.no_such_function", "AttributeError"),
    (compat.ATTR, "sglang.srt.no_such_module.thing", "AttributeError"),
    (compat.MEMBER, "sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2._no_such_method", "AttributeError"),
    # an instance attribute is not a class member: _draft_block_ids_buf is only set in __init__
    (compat.MEMBER, "sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2._draft_block_ids_buf", "AttributeError"),
    (compat.INSTANCE, "sglang.srt.speculative.dflash_worker_v2.DFlashWorkerV2._no_such_buf", "AttributeError"),
    (compat.FIELD, "sglang.srt.server_args.ServerArgs.no_such_field", "AttributeError"),
    (compat.FIELD, "sglang.srt.server_args.ServerArgs.get_model_config", "AttributeError"),  # a method
    (compat.PARAMS, "sglang.srt.mem_cache.allocation.alloc_for_spec_decode(reqs, no_such_kwarg)", "TypeError"),
])
def test_a_missing_name_of_each_kind_is_reported(monkeypatch, kind, path, error):
    pytest.importorskip("sglang")
    monkeypatch.setattr(compat, "UPSTREAM_SYMBOLS", (compat.Symbol(path, "a test", kind),))
    missing = compat.missing_upstream_symbols()
    assert len(missing) == 1 and missing[0][:2] == (path, "a test"), missing
    assert missing[0][2].startswith(error), missing
