"""The shared test helpers themselves: ``import_or_skip`` skips only for a module that is not installed."""

import sys

import pytest

from tree_cases import import_or_skip


def test_import_or_skip_skips_only_a_missing_module(tmp_path, monkeypatch):
    pkg = tmp_path / "ddtree_fake_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ok.py").write_text("VALUE = 3\n")
    (pkg / "broken_dep.py").write_text("import ddtree_no_such_dependency\n")
    (pkg / "broken.py").write_text("raise ImportError('undefined symbol: foo')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("ddtree_fake_pkg")]:
        monkeypatch.delitem(sys.modules, name)

    assert import_or_skip("ddtree_fake_pkg.ok").VALUE == 3
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        import_or_skip("ddtree_no_such_top_level")
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        import_or_skip("ddtree_fake_pkg.missing_submodule")
    with pytest.raises(ModuleNotFoundError, match="ddtree_no_such_dependency"):
        import_or_skip("ddtree_fake_pkg.broken_dep")  # installed, but its own import fails: not a skip
    with pytest.raises(ImportError, match="undefined symbol"):
        import_or_skip("ddtree_fake_pkg.broken")
