"""Plugin discovery through the installed wheel's real entry point, idempotent registration, the
algorithm's predicates, and the version gate. Registration tests run in fresh interpreters: SGLang
loads plugins once per process, exactly as in its launcher, engine and scheduler processes."""

import importlib.metadata as metadata
import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("sglang")


def _run_py(code: str, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout)


def test_entry_point_is_installed():
    eps = [ep for ep in metadata.entry_points(group="sglang.srt.plugins") if ep.name == "ddtree"]
    assert len(eps) == 1, "install the wheel: pip install sglang_ddtree-*.whl"
    assert eps[0].value == "sglang_ddtree.plugin:register"
    assert eps[0].dist is not None and eps[0].dist.name.replace("-", "_") == "sglang_ddtree"


def test_load_plugins_registers_ddtree_in_a_fresh_process():
    proc = _run_py("""
        import json
        from sglang.srt.plugins import load_plugins
        load_plugins()
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
        from sglang.srt import server_args as sa
        from sglang.srt.entrypoints.engine import Engine
        algo = SpeculativeAlgorithm.from_string("ddtree")
        print(json.dumps({
            "algo": type(algo).__name__, "name": algo.name, "overlap": algo.supports_overlap,
            "server_args": sa.ServerArgs.__name__, "engine_args": Engine.server_args_class.__name__,
            # the record's fields: a dataclass's up to 0.5.19, a msgspec Struct's from 0.5.20
            "fields": [f for f in ("speculative_ddtree_budget", "speculative_ddtree_topk")
                       if f in (getattr(sa.ServerArgs, "__dataclass_fields__", None)
                                or sa.ServerArgs.__struct_fields__)],
        }))
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {
        "algo": "DDTreeSpecAlgo", "name": "DDTREE", "overlap": True,
        "server_args": "DDTreeServerArgs", "engine_args": "DDTreeServerArgs",
        "fields": ["speculative_ddtree_budget", "speculative_ddtree_topk"],
    }


def test_register_is_idempotent():
    proc = _run_py("""
        from sglang_ddtree.plugin import register
        from sglang.srt.plugins import load_plugins
        from sglang.srt.plugins.hook_registry import HookRegistry
        from sglang.srt.speculative import spec_registry
        register(); register()
        load_plugins()   # calls register() once more through the entry point
        register()
        assert list(spec_registry._REGISTRY).count("DDTREE") == 1
        assert len(HookRegistry._hooks["sglang.srt.server_args.ServerArgs"]) == 1
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")


def test_launch_server_help_lists_the_flags():
    proc = subprocess.run([sys.executable, "-m", "sglang.launch_server", "--help"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    help_text = " ".join(proc.stdout.split())
    assert "--speculative-ddtree-budget SPECULATIVE_DDTREE_BUDGET" in help_text
    assert "--speculative-ddtree-topk SPECULATIVE_DDTREE_TOPK" in help_text
    assert "Range [1, 1024], or 'auto': every round picks the budget (0 = no drafting" in help_text
    assert ("('auto:N': buckets up to N); default 'auto' at --tp-size 1, --page-size 1, fa3 (DDTREE's fused tree "
            "attention) or triton, SGLang 0.5.16, else 64 (15 on hybrid Gated DeltaNet targets); the start-up log "
            "says which.") in help_text


def test_predicates_answer_like_dflash_for_drafting(sglang_with_plugin):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import _assert_custom_spec_algo_conforms

    from sglang_ddtree.algorithm import DDTreeSpecAlgo

    algo = SpeculativeAlgorithm.from_string("DDTREE")
    assert isinstance(algo, DDTreeSpecAlgo)
    _assert_custom_spec_algo_conforms(DDTreeSpecAlgo)
    assert algo.is_speculative() and algo.is_some() and not algo.is_none()
    assert algo.is_dflash_family() and algo.supports_target_verify_for_draft() and algo.has_draft_kv()
    assert not (algo.is_eagle() or algo.is_eagle3() or algo.is_dflash() or algo.is_ngram() or algo.is_standalone())
    assert algo.need_topk() is False and algo.carries_draft_hidden_states() is False
    # Each runner's own server args give its verify width: budget + 1 (target), block size (draft).
    assert algo.get_num_tokens_per_req_for_target_verify(65, is_draft_worker=False) == 65
    assert algo.get_num_tokens_per_req_for_target_verify(16, is_draft_worker=True) == 16


def test_create_future_map_builds_upstreams_future_map(sglang_with_plugin, monkeypatch):
    from sglang.srt.managers import overlap_utils
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    seen = {}

    class FakeFutureMap:
        def __init__(self, *args):
            seen["args"] = args

    monkeypatch.setattr(overlap_utils, "FutureMap", FakeFutureMap)
    algo = SpeculativeAlgorithm.from_string("DDTREE")
    fm = algo.create_future_map("cpu", "pool", needs_cpu_seq_lens=False)
    assert isinstance(fm, FakeFutureMap)
    assert seen["args"] == ("cpu", algo, "pool", False, False)


@pytest.mark.parametrize("two_batch_overlap", [False, True])
def test_future_map_asks_for_host_lengths_only_under_two_batch_overlap(sglang_with_plugin, monkeypatch,
                                                                      two_batch_overlap):
    """A backend's ``needs_cpu_seq_lens`` (flashinfer's) makes upstream's scheduler wait for round k and copy its
    lengths before it launches round k + 1; DDTREE's round plans from its own host bounds, so its future map
    declines, except under two-batch overlap, which reads them outside the backends."""
    from sglang.srt.managers import overlap_utils
    from sglang.srt.runtime_context import get_context
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    seen = []
    monkeypatch.setattr(overlap_utils, "FutureMap", lambda *args: seen.append(args))
    algo = SpeculativeAlgorithm.from_string("DDTREE")
    with get_context().override_server_args(enable_two_batch_overlap=two_batch_overlap):
        algo.create_future_map("cuda", "pool", needs_cpu_seq_lens=True, needs_confidence_relay=True)
        algo.create_future_map("cuda", "pool", needs_cpu_seq_lens=False)
    assert seen == [("cuda", algo, "pool", two_batch_overlap, True), ("cuda", algo, "pool", False, False)]


def test_unsupported_sglang_version_is_a_clear_runtime_error(monkeypatch):
    from sglang_ddtree import plugin

    monkeypatch.setattr(plugin, "_registered", False)
    monkeypatch.setattr(plugin, "installed_sglang_version", lambda: "0.9.0")
    with pytest.raises(RuntimeError, match=r"supports sglang>=0\.5\.16,<0\.5\.24, but sglang 0\.9\.0 is installed"):
        plugin.register()
    monkeypatch.setattr(plugin, "installed_sglang_version", lambda: None)
    with pytest.raises(RuntimeError, match="no sglang is installed"):
        plugin.register()


def test_supported_range_is_stated_once():
    import sglang_ddtree
    from sglang_ddtree.version import SUPPORTED_SGLANG_SPEC

    assert SUPPORTED_SGLANG_SPEC == ">=0.5.16,<0.5.24"
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    requires = [Requirement(r) for r in metadata.requires("sglang_ddtree") or []]
    sglang_reqs = [r for r in requires if r.name == "sglang"]
    assert len(sglang_reqs) == 1 and sglang_reqs[0].specifier == SpecifierSet(SUPPORTED_SGLANG_SPEC)
    assert metadata.version("sglang_ddtree") == sglang_ddtree.__version__
