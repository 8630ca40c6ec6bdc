"""scripts/check_upstream.py, without the network: a tiny fake SGLang release written here, and the
installed SGLang 0.5.16 (every compat entry must read ok from its source)."""

import importlib.util
import json
import os
import textwrap
import zipfile

import pytest

from sglang_ddtree import compat

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("check_upstream", os.path.join(ROOT, "scripts", "check_upstream.py"))
cu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cu)

M, A, MEM, I, F, P = compat.MODULE, compat.ATTR, compat.MEMBER, compat.INSTANCE, compat.FIELD, compat.PARAMS

# A release: a class with inherited members, a re-export, a star import, an alias, a class that moved,
# a method that became a function, a field that moved to a sub-record, dataclasses, a rebuilt struct.
RELEASE = {
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/base.py": '''
        class Base:
            base_field: int = 0

            def __init__(self):
                self.from_base = 1

            def base_method(self, a, b):
                pass
    ''',
    "sglang/srt/impl.py": '''
        def reexported_fn(a, b, *, c=None):
            pass

        def star_fn():
            pass

        def _private():
            pass
    ''',
    "sglang/srt/mod.py": '''
        from .base import Base
        from sglang.srt.impl import reexported_fn
        from sglang.srt.impl import *
        import sglang.srt.ns.leaf as leaf_alias

        class Worker(Base):
            mode: int = 0

            def __init__(self, server_args, gpu_id, nccl_port, target_worker=None):
                super().__init__()
                self.ready = True
                setattr(self, "via_setattr", 2)

            def step(self, batch, *, extra=None, **kwargs):
                pass

            @staticmethod
            def static(x, y):
                pass

        def helper(x, y=1):
            pass

        ALIAS = helper

        class Req:
            def __init__(self):
                self.kv = ReqKv()

        class ReqKv:
            kv_len: int = 0
    ''',
    "sglang/srt/newhome.py": '''
        class MovedClass:
            def m(self, q):
                pass

        def became_function(batch):
            pass
    ''',
    "sglang/srt/records.py": '''
        import dataclasses
        from dataclasses import dataclass, field
        from typing import ClassVar

        import msgspec

        @dataclass
        class Rec:
            a: int
            b: int = 0
            c: ClassVar[int] = 0
            d: list = field(default_factory=list, init=False)

        @dataclasses.dataclass
        class Sub(Rec):
            e: int = 1

        class PartOne(msgspec.Struct):
            x: int = 0

            def part_method(self):
                pass

        class PartTwo(msgspec.Struct):
            y: int = 0

        class Rebuilt:
            def method(self):
                pass

        _PARTS = [PartOne, PartTwo]
        _fields = collect(_PARTS)
        Rebuilt.__annotations__ = {**_fields, **Rebuilt.__annotations__}
        Rebuilt = msgspec.defstruct("Rebuilt", list(Rebuilt.__annotations__), namespace=vars(Rebuilt))
    ''',
    "sglang/srt/ns/leaf.py": "VALUE = 1\n",  # a namespace package (no __init__.py)
}

EXPECTED = [  # (path, kind, purpose, status)
    ("sglang.srt.mod", M, "t", "ok"),
    ("sglang.srt.ns.leaf", M, "t", "ok"),
    ("sglang.srt.mod.helper", A, "t", "ok"),
    ("sglang.srt.mod.reexported_fn", A, "re-export", "ok"),
    ("sglang.srt.mod.star_fn", A, "star import", "ok"),
    ("sglang.srt.mod.ALIAS", A, "t", "ok"),
    ("sglang.srt.mod.leaf_alias.VALUE", A, "through a module alias", "ok"),
    ("sglang.srt.mod.Worker.step", MEM, "method on a class", "ok"),
    ("sglang.srt.mod.Worker.static", MEM, "t", "ok"),
    ("sglang.srt.mod.Worker.base_method", MEM, "inherited method", "ok"),
    ("sglang.srt.mod.Worker.mode", F, "t", "ok"),
    ("sglang.srt.mod.Worker.base_field", F, "inherited field", "ok"),
    ("sglang.srt.mod.Worker.ready", I, "self-assigned", "ok"),
    ("sglang.srt.mod.Worker.via_setattr", I, "setattr(self, ...)", "ok"),
    ("sglang.srt.mod.Worker.from_base", I, "self-assigned in the base", "ok"),
    ("sglang.srt.mod.Worker.mode", I, "a field is an instance attribute", "ok"),
    ("sglang.srt.records.Rebuilt.x", F, "field of a rebuilt struct", "ok"),
    ("sglang.srt.records.Rebuilt.method", MEM, "t", "ok"),
    ("sglang.srt.mod.Worker.__init__(server_args, gpu_id, nccl_port)", P, "super().__init__ positional order", "ok"),
    ("sglang.srt.mod.Worker(server_args, gpu_id)", P, "positional order of the class call", "ok"),
    ("sglang.srt.mod.Worker.step(extra, anything)", P, "keywords (takes **kwargs)", "ok"),
    ("sglang.srt.mod.Worker.static(x, y)", P, "positional: a staticmethod keeps its first name", "ok"),
    ("sglang.srt.mod.reexported_fn(b, c)", P, "keywords through a re-export", "ok"),
    ("sglang.srt.mod.ALIAS(y)", P, "keywords through an alias", "ok"),
    ("sglang.srt.records.Rec(b, a)", P, "dataclass keywords, any order", "ok"),
    ("sglang.srt.records.Sub(a, b, e)", P, "positional order of inherited dataclass fields", "ok"),
    # moved
    ("sglang.srt.mod.MovedClass", A, "t", "moved"),
    ("sglang.srt.mod.MovedClass.m", MEM, "member of a moved class", "moved"),
    ("sglang.srt.mod.Worker.became_function", MEM, "a method that became a function", "moved"),
    ("sglang.srt.mod.Req.kv_len", I, "a field that moved to a sub-record", "moved"),
    ("sglang.srt.old_place.leaf", M, "a module that moved", "moved"),
    ("sglang.srt.mod._private", A, "not exported by the star import: found in impl", "moved"),
    ("sglang.srt.records.Rebuilt.part_method", MEM, "the rebuild takes the parts' fields, not methods", "moved"),
    # missing
    ("sglang.srt.no_such_module", M, "t", "missing"),
    ("sglang.srt.mod.gone", A, "t", "missing"),
    ("sglang.srt.mod.Worker.gone_method", MEM, "t", "missing"),
    ("sglang.srt.mod.Worker.ready", MEM, "set on instances only: not a class member", "missing"),
    ("sglang.srt.mod.Worker.step", F, "a method is not a field", "missing"),
    ("sglang.srt.records.Rec.c", F, "a ClassVar is not a field", "missing"),
    ("sglang.srt.mod.helper.attr", A, "attributes of a function are not read", "missing"),
    # signature changed
    ("sglang.srt.mod.Worker.__init__(server_args, gpu_id, ps, nccl_port)", P, "positional order", "signature-changed"),
    ("sglang.srt.mod.Worker.__init__(gpu_id, server_args)", P, "positional: swapped", "signature-changed"),
    ("sglang.srt.mod.helper(x, z)", P, "keywords: z is gone", "signature-changed"),
    ("sglang.srt.records.Rec(a, d)", P, "an init=False field is no parameter", "signature-changed"),
    ("sglang.srt.mod.MovedClass.m(q, r)", P, "moved and changed", "signature-changed"),
    # another wheel
    ("sgl_kernel.fast_op", A, "t", "not-checked"),
]


def _write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text))
    return str(root)


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("release"), RELEASE)


def _by_case(results):
    return {(r["path"], r["kind"]): r for r in results}


def test_each_status_on_a_fake_release(release):
    symbols = [compat.Symbol(path, purpose, kind) for path, kind, purpose, _ in EXPECTED]
    results = _by_case(cu.analyse(release, symbols))
    wrong = {(p, k): (results[(p, k)]["status"], want) for p, k, _, want in EXPECTED
             if results[(p, k)]["status"] != want}
    assert not wrong, "\n".join(f"{p} [{k}]: got {got}, want {want}" for (p, k), (got, want) in wrong.items())


def test_what_the_report_says(release):
    symbols = [compat.Symbol(path, purpose, kind) for path, kind, purpose, _ in EXPECTED]
    r = _by_case(cu.analyse(release, symbols))
    assert r[("sglang.srt.mod.reexported_fn", A)]["at"] == "sglang/srt/impl.py:2"  # where it is defined
    assert r[("sglang.srt.records.Rebuilt.x", F)]["at"] == "sglang/srt/records.py:20"  # in the part
    assert r[("sglang.srt.mod.MovedClass", A)]["moved_to"] == "sglang.srt.newhome.MovedClass"
    assert r[("sglang.srt.mod.MovedClass.m", MEM)]["moved_to"] == "sglang.srt.newhome.MovedClass.m"
    assert r[("sglang.srt.mod.Worker.became_function", MEM)]["moved_to"] == "sglang.srt.newhome.became_function"
    assert r[("sglang.srt.mod.Req.kv_len", I)]["moved_to"] == "sglang.srt.mod.ReqKv.kv_len"
    assert r[("sglang.srt.old_place.leaf", M)]["moved_to"] == "sglang.srt.ns.leaf"
    assert r[("sglang.srt.mod._private", A)]["moved_to"] == "sglang.srt.impl._private"
    assert r[("sglang.srt.records.Rebuilt.part_method", MEM)]["moved_to"] == "sglang.srt.records.PartOne.part_method"
    changed = r[("sglang.srt.mod.Worker.__init__(server_args, gpu_id, ps, nccl_port)", P)]
    assert changed["params"] == ["server_args", "gpu_id", "nccl_port", "target_worker"]
    assert changed["missing_params"] == ["ps"] and changed["required"] == ["server_args", "gpu_id", "nccl_port"]
    moved = r[("sglang.srt.mod.MovedClass.m(q, r)", P)]
    assert moved["moved_to"] == "sglang.srt.newhome.MovedClass.m" and moved["params"] == ["q"]
    assert r[("sglang.srt.records.Sub(a, b, e)", P)]["params"] == ["a", "b", "e"]  # no ClassVar, no init=False


def test_renames_and_signature_changes_against_a_baseline(tmp_path):
    old = _write(tmp_path / "old", {"sglang/__init__.py": "", "sglang/m.py": '''
        class Info:
            reserved_len: int = 0
            kept: int = 0

        def hooked(batch, server_args):
            pass
    '''})
    new = _write(tmp_path / "new", {"sglang/__init__.py": "", "sglang/m.py": '''
        class Info:
            next_len: int = 0
            kept: int = 0

        def hooked(batch, page_size, *, flag=False):
            pass
    '''})
    symbols = [compat.Symbol("sglang.m.Info.reserved_len", "t", F), compat.Symbol("sglang.m.hooked", "t", A)]
    before, after = cu.analyse(old, symbols), cu.analyse(new, symbols, baseline_root=old)
    assert [r["status"] for r in before] == ["ok", "ok"]
    assert after[0]["status"] == "missing" and after[0]["new_on_owner"] == ["next_len"]
    assert after[1]["status"] == "ok"  # an ATTR entry checks the name only; the notes tell the rest
    assert cu.signature_notes(after, before) == {"sglang.m.hooked": {
        "added": ["page_size", "flag"], "removed": ["server_args"], "added_required": ["page_size"]}}


def test_pins_from_metadata():
    metadata = textwrap.dedent("""\
        Name: sglang
        Requires-Dist: flashinfer_python[cu13]==0.6.14
        Requires-Dist: sglang-kernel==0.4.5
        Requires-Dist: torch==2.11.0
        Requires-Dist: torch_memory_saver>=0.0.9.post1
        Requires-Dist: transformers==5.12.1
        Requires-Dist: torch==9.9; extra == "other"
    """)
    assert cu.read_pins(metadata) == {"flashinfer-python": "==0.6.14", "sglang-kernel": "==0.4.5",
                                      "torch": "==2.11.0", "transformers": "==5.12.1"}


def test_main_on_a_cached_wheel(tmp_path, capsys):
    """A wheel already in the cache is not downloaded; the report is one JSON document, a line per symbol."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with zipfile.ZipFile(cache / "sglang-9.9.9-py3-none-any.whl", "w") as z:
        for rel, text in RELEASE.items():
            z.writestr(rel, textwrap.dedent(text))
        z.writestr("sglang-9.9.9.dist-info/METADATA", "Name: sglang\nRequires-Dist: torch==3.0\n")
    out = tmp_path / "scan.json"
    rc = cu.main(["9.9.9", "--cache", str(cache), "--out", str(out)])
    report = json.loads(out.read_text())
    rel = report["releases"]["9.9.9"]
    assert rc == 1 and rel["pins"] == {"torch": "==3.0"}  # the fake release lacks compat's symbols
    assert sum(rel["counts"].values()) == len(compat.symbols_for("9.9.9")) < len(compat.symbols()) == report["symbols"]
    assert rel["counts"]["missing"] > 0 and "9.9.9  [torch ==3.0]" in capsys.readouterr().out
    assert len(out.read_text().splitlines()) > sum(rel["counts"].values())  # one line per symbol of the release


def _installed_sglang_root():
    spec = importlib.util.find_spec("sglang")
    return None if spec is None or not spec.origin else os.path.dirname(os.path.dirname(spec.origin))


@pytest.mark.skipif(_installed_sglang_root() is None, reason="sglang is not installed")
def test_installed_sglang_reads_all_ok():
    """The pinned SGLang's own source, read statically: every entry that lives in the sglang package is ok
    (the runtime check, test_compat_scan, says the same by importing it)."""
    from importlib.metadata import version

    results = cu.analyse(_installed_sglang_root(), compat.symbols_for(version("sglang")), packages=["sglang"])
    bad = [f"{r['path']} [{r['kind']}]: {r['status']} {r.get('detail', '')}" for r in results
           if r["status"] != ("ok" if r["path"].startswith("sglang.") else "not-checked")]
    assert not bad, "\n".join(bad)
    assert sum(r["status"] == "ok" for r in results) > 200


# ---- --run-suite: its pure parts (nothing installed, no pytest run) ----------------------------------
@pytest.mark.parametrize("text, want", [
    ("....\n== 2 failed, 10 passed, 1 skipped, 3 errors in 9.12s ==\n", {"failed": 2, "passed": 10, "skipped": 1, "error": 3}),
    ("FAILED test/a.py::t - x\n3 failed, 700 passed, 25 deselected, 1 warning in 912.50s (0:15:12)\n",
     {"failed": 3, "passed": 700, "deselected": 25, "warning": 1}),
    ("1 error in 0.5s\n", {"error": 1}),
    ("collected 0 items\n\n== no tests ran in 0.01s ==\n", {}),
    ("Traceback (most recent call last):\nKeyboardInterrupt\n", {}),  # died before its closing line
    ("4 passed in 1.0s\nsome later line in 2s\n", {"passed": 4}),  # only a real summary counts
])
def test_pytest_summary_line(text, want):
    assert cu.parse_pytest_summary(text) == want


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="1" failures="2">
<testcase classname="test.worker.test_worker" name="test_ok" file="test/worker/test_worker.py" time="0.1"/>
<testcase classname="test.worker.test_worker" name="test_widths[4]" file="test/worker/test_worker.py" time="0.2">
<failure message="TypeError: create_dummy_verify_input() got an unexpected keyword argument 'server_args'">def test_widths():
&gt;       run()
/tmp/sglang-suite-0.5.18-x/venv/lib/python3.11/site-packages/sglang_ddtree/worker/graph.py:41: in run
    create_dummy_verify_input(server_args=args)
E       TypeError: create_dummy_verify_input() got an unexpected keyword argument 'server_args'
</failure></testcase>
<testcase classname="test.plugin.test_registration.TestLoad" name="test_fresh" file="test/plugin/test_registration.py">
<failure message="AssertionError: Traceback (most recent call last):">&gt;       assert proc.returncode == 0, proc.stderr
E       AssertionError: Traceback (most recent call last):
E           File "/tmp/s/venv/lib/python3.11/site-packages/sglang_ddtree/plugin.py", line 70, in register
E           File "/tmp/s/venv/lib/python3.11/site-packages/sglang/srt/server_args.py", line 9, in f
E         AttributeError: type object 'ServerArgs' has no attribute 'override'
E       assert 1 == 0
</failure></testcase>
<testcase classname="test.tree.test_build" name="test_heap" file="test/tree/test_build.py">
<error message="failed on setup with &quot;ImportError: cannot import name 'X'&quot;">E   ImportError: cannot import name 'X' from 'sglang.srt.y' (/tmp/s/venv/lib/python3.11/site-packages/sglang/srt/y.py)
</error></testcase>
</testsuite></testsuites>"""


def test_junit_failures_and_their_frames():
    got = cu.parse_junit(JUNIT)
    assert [(f["test"], f["outcome"]) for f in got] == [
        ("test/worker/test_worker.py::test_widths[4]", "failed"),
        ("test/plugin/test_registration.py::TestLoad::test_fresh", "failed"),
        ("test/tree/test_build.py::test_heap", "error")]
    assert got[0]["ours"] == "sglang_ddtree/worker/graph.py:41" and got[0]["upstream"] is None
    assert got[0]["root_error"].startswith("TypeError: create_dummy_verify_input()")
    # the child's error, not the test's AssertionError around its stderr
    assert got[1]["root_error"] == "AttributeError: type object 'ServerArgs' has no attribute 'override'"
    assert got[1]["ours"] == "sglang_ddtree/plugin.py:70" and got[1]["upstream"] == "sglang/srt/server_args.py:9"
    assert got[2]["root_error"].startswith("ImportError: cannot import name 'X'")


def test_failures_grouped_by_cause():
    failures = cu.parse_junit(JUNIT) + [dict(cu.parse_junit(JUNIT)[0], test="test/worker/test_worker.py::test_widths[8]")]
    causes = [("server_args dropped", r"unexpected keyword argument 'server_args'", "0.5.18")]
    groups = cu.classify(failures, causes)
    assert [(g["cause"], g["count"]) for g in groups][0] == ("server_args dropped", 2)
    assert groups[0]["our_modules"] == ["sglang_ddtree/worker/graph.py"] and groups[0]["what"] == "0.5.18"
    unclassified = {g["cause"] for g in groups[1:]}  # numbers and /tmp paths blurred
    assert unclassified == {"unclassified: AttributeError: type object 'ServerArgs' has no attribute 'override'",
                            "unclassified: ImportError: cannot import name 'X' from 'sglang.srt.y' (sglang/srt/y.py)"}
    assert all(g["cause"].startswith("artefact") for g in cu.classify(
        [dict(failures[0], test="test/plugin/test_registration.py::test_supported_range_is_stated_once")]))


def _max_exclusive():
    from sglang_ddtree.version import SUPPORTED_SGLANG_MAX_EXCLUSIVE
    return SUPPORTED_SGLANG_MAX_EXCLUSIVE


def test_version_gate_lifted_in_the_snapshot():
    text = open(os.path.join(ROOT, "python", "sglang_ddtree", "version.py")).read()
    lifted = cu.lift_version_gate(text, "0.9.0")
    assert 'SUPPORTED_SGLANG_MAX_EXCLUSIVE = "0.9.1"' in lifted
    assert lifted.replace('"0.9.1"', "X") == text.replace(f'"{_max_exclusive()}"', "X")  # nothing else changes
    assert 'MAX_EXCLUSIVE = "0.6.1"' in cu.lift_version_gate(text, "0.6.0.post1")
    assert cu.lift_version_gate(text, "0.5.17.post1") == text  # a supported release: nothing to lift


def test_requirements_against_what_is_installed():
    metadata = textwrap.dedent("""\
        Requires-Dist: torch==2.11.0
        Requires-Dist: Transformers==5.12.1
        Requires-Dist: flashinfer_python[cu13]==0.6.14
        Requires-Dist: numpy
        Requires-Dist: pytest; extra == "test"
        Requires-Dist: pywin32; sys_platform == "win32"
    """)
    reqs = cu.requirements(metadata)
    assert len(reqs) == 5  # the extra's line is not the release's own requirement
    rows = cu.compare_requirements(reqs, {"torch": "2.13.0+cpu", "transformers": "5.12.1", "numpy": "2.1.0"})
    assert rows == [{"name": "torch", "wants": "==2.11.0", "have": "2.13.0+cpu", "ok": False},
                    {"name": "transformers", "wants": "==5.12.1", "have": "5.12.1", "ok": True},
                    {"name": "flashinfer-python", "wants": "==0.6.14", "have": None, "ok": False},
                    {"name": "numpy", "wants": "(any)", "have": "2.1.0", "ok": True}]  # win32 marker: not here
