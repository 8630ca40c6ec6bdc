"""The version layer (``sglang_ddtree.compat.release`` and the adapters): every supported release has a
family, the installed release gets its family's adapter, and each adapter turns the hooks written against
0.5.16's signatures into what its release calls."""

import types
from importlib.metadata import version

import pytest
from packaging.specifiers import SpecifierSet

from sglang_ddtree import compat
from sglang_ddtree.compat import sglang_0_5_16, sglang_0_5_17, sglang_0_5_18
from sglang_ddtree.version import SUPPORT_MATRIX, SUPPORTED_SGLANG_MIN, SUPPORTED_SGLANG_SPEC


def test_every_supported_release_has_a_family_and_a_row():
    assert SUPPORTED_SGLANG_MIN in SUPPORT_MATRIX
    for release in SUPPORT_MATRIX:
        assert release in SpecifierSet(SUPPORTED_SGLANG_SPEC), release
        assert compat.adapter_for(release).family == compat.family_of(release).first
    assert [f.first for f in compat.FAMILIES] == sorted((f.first for f in compat.FAMILIES), key=lambda v: tuple(
        map(int, v.split("."))))
    with pytest.raises(ValueError, match="older than the oldest release family"):
        compat.family_of("0.5.15")


@pytest.mark.parametrize("release, family", [("0.5.16", "0.5.16"), ("0.5.17", "0.5.17"), ("0.5.18", "0.5.18"),
                                             ("0.5.18.post1", "0.5.18"), ("0.5.19", "0.5.19"), ("0.5.23", "0.5.19")])
def test_a_release_belongs_to_the_last_family_not_newer(release, family):
    assert compat.family_of(release).first == family


def test_the_installed_release_gets_its_familys_adapter():
    installed = version("sglang")
    assert compat.adapter().version == installed
    assert compat.adapter().family == compat.family_of(installed).first


def test_process_wide_widths_from_0_5_17():
    assert not sglang_0_5_16.Adapter("0.5.16").reads_spec_process_wide
    assert sglang_0_5_17.Adapter("0.5.17").reads_spec_process_wide
    assert sglang_0_5_18.Adapter("0.5.18").reads_spec_process_wide


def _hook_0516(original, spec_algorithm, server_args, custom_mask, num_tokens_per_req, is_draft_worker):
    """A 0.5.16-signature hook: passes through, tagging what it saw."""
    out = original(spec_algorithm, server_args, custom_mask, num_tokens_per_req, is_draft_worker)
    return ("hooked", server_args, out)


def test_0_5_16_hooks_are_registered_as_written():
    a = sglang_0_5_16.Adapter("0.5.16")
    assert a.adapt_hook(sglang_0_5_18._DUMMY, _hook_0516) is _hook_0516


def test_0_5_18_dummy_hook_gets_the_published_server_args(monkeypatch):
    published = types.SimpleNamespace(speculative_algorithm="DDTREE")
    monkeypatch.setattr(sglang_0_5_18, "_published_server_args", lambda: published)
    adapted = sglang_0_5_18.Adapter("0.5.18").adapt_hook(sglang_0_5_18._DUMMY, _hook_0516)
    calls = []

    def original_0518(spec_algorithm, custom_mask, num_tokens_per_req, is_draft_worker):
        calls.append((spec_algorithm, custom_mask, num_tokens_per_req, is_draft_worker))
        return "dummy"

    assert adapted(original_0518, "algo", "mask", 65, False) == ("hooked", published, "dummy")
    assert calls == [("algo", "mask", 65, False)]


@pytest.mark.parametrize("target", [sglang_0_5_18._ALLOC_LEN, sglang_0_5_18._EXTRA_CTX])
def test_0_5_18_sizing_hooks_get_the_published_server_args(monkeypatch, target):
    published = types.SimpleNamespace(name="published")
    monkeypatch.setattr(sglang_0_5_18, "_published_server_args", lambda: published)

    def hook_0516(original, server_args):
        return original(server_args) + 1, server_args

    adapted = sglang_0_5_18.Adapter("0.5.18").adapt_hook(target, hook_0516)
    assert adapted(lambda: 10) == (11, published)  # upstream's 0.5.18 function takes no arguments


def test_0_5_18_leaves_other_hooks_alone():
    a = sglang_0_5_18.Adapter("0.5.18")
    assert a.adapt_hook("sglang.srt.speculative.dflash_utils.validate_dflash_request", _hook_0516) is _hook_0516


def test_write_fields_on_a_plain_object():
    view = types.SimpleNamespace(speculative_num_draft_tokens=65, speculative_eagle_topk=8)
    compat.adapter().write_fields(view, "test", {"speculative_num_draft_tokens": 16, "speculative_eagle_topk": 1})
    assert (view.speculative_num_draft_tokens, view.speculative_eagle_topk) == (16, 1)


def test_draft_view_of_a_resolved_upstream_server_args():
    """A resolved (read-only from 0.5.17) upstream ServerArgs: the drafter's copy gets its widths through the
    adapter, the original keeps the target's."""
    from sglang.srt.runtime_context import get_context

    from sglang_ddtree.config import DDTreeConfig
    from sglang_ddtree.worker.draft_view import draft_server_args_view

    with get_context().override_server_args() as published:
        view = draft_server_args_view(published, DDTreeConfig(15, 4, 8))
        assert (view.speculative_num_draft_tokens, view.speculative_eagle_topk) == (8, 1)
        assert (published.speculative_num_draft_tokens, published.speculative_eagle_topk) == (None, None)


def test_drafter_widths_scope_the_process_wide_spec_namespace():
    """From 0.5.17 the drafter's widths are scoped on ``get_spec()`` (the target's restored after); before,
    the draft runner reads its own copy of the server args and the scope changes nothing."""
    import contextlib

    from sglang.srt.runtime_context import get_context

    from sglang_ddtree.config import DDTreeConfig

    a, config = compat.adapter(), DDTreeConfig(15, 4, 8)
    if not a.reads_spec_process_wide:
        assert isinstance(a.drafter_widths(config), contextlib.nullcontext)
        return
    from sglang.srt.runtime_context import get_spec

    with get_context().override_server_args(speculative_num_draft_tokens=16, speculative_eagle_topk=4):
        with a.drafter_widths(config):
            assert (get_spec().speculative_num_draft_tokens, get_spec().speculative_eagle_topk) == (8, 1)
        assert (get_spec().speculative_num_draft_tokens, get_spec().speculative_eagle_topk) == (16, 4)


def test_init_dflash_worker_runs_in_the_drafters_widths(monkeypatch):
    a, seen = compat.adapter(), []
    monkeypatch.setattr(type(a), "drafter_widths", lambda self, config: _Recorder(seen, config))
    a.init_dflash_worker(lambda *args: seen.append(("init", args)), "view", "cfg", 0, "ps", 1234, "tw")
    assert seen[0] == ("enter", "cfg") and seen[-1] == ("exit", "cfg")
    assert seen[1][0] == "init" and seen[1][1][0] == "view" and seen[1][1][-1] == "tw"


class _Recorder:
    def __init__(self, seen, config):
        self.seen, self.config = seen, config

    def __enter__(self):
        self.seen.append(("enter", self.config))

    def __exit__(self, *exc):
        self.seen.append(("exit", self.config))


def test_kv_lengths_by_release():
    req = types.SimpleNamespace(kv_committed_len=5, kv=types.SimpleNamespace(kv_committed_len=7))
    old, new = compat.adapter_for("0.5.18"), compat.adapter_for("0.5.19")
    assert (old.committed_len(req), new.committed_len(req)) == (5, 7)
    info = types.SimpleNamespace()
    old.record_reserved_lens(info, "cpu", 12)
    assert vars(info) == {"reserved_seq_lens_cpu": "cpu", "reserved_seq_lens_sum": 12}
    assert old.reserved_lens_cpu(info) == "cpu"
    info = types.SimpleNamespace()
    new.record_reserved_lens(info, "cpu", 12)
    assert vars(info) == {"nxt_kv_lens_cpu": "cpu", "nxt_kv_lens_sum": 12}
    assert new.reserved_lens_cpu(info) == "cpu"


@pytest.mark.parametrize("release, env, refused", [("0.5.19", "1", True), ("0.5.19", "0", False),
                                                   ("0.5.19", "", False), ("0.5.18", "1", False),
                                                   ("0.5.18", "", False)])
def test_fa3_tree_attention_is_refused_where_the_release_cannot_carry_it(monkeypatch, release, env, refused):
    from sglang_ddtree import validation
    from sglang_ddtree.config import DDTreeArgumentError
    from sglang_ddtree.worker import fa3_tree

    monkeypatch.setenv(fa3_tree.ENV, env)
    monkeypatch.setattr(compat, "adapter", lambda: compat.adapter_for(release))
    if not refused:
        validation._check_release_features()
        # unset: the fused path where the release carries it, the cascade where it does not
        assert fa3_tree.enabled() is (env == "1" or (env == "" and release != "0.5.19"))
        return
    with pytest.raises(DDTreeArgumentError) as e:
        validation._check_release_features()
    assert str(e.value).startswith(f"{fa3_tree.ENV}=1 is not supported with --speculative-algorithm DDTREE on "
                                   "sglang 0.5.19: FlashAttentionBackend._apply_cuda_graph_metadata changed")
    assert "unset it" in str(e.value) and "\n" not in str(e.value)
