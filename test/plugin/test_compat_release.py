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
                                             ("0.5.18.post1", "0.5.18"), ("0.5.19", "0.5.19"), ("0.5.20", "0.5.20"),
                                             ("0.5.21", "0.5.21"), ("0.5.23", compat.FAMILIES[-1].first)])
def test_a_release_belongs_to_the_last_family_not_newer(release, family):
    assert compat.family_of(release).first == family


def test_the_installed_release_gets_its_familys_adapter():
    installed = version("sglang")
    assert compat.adapter().version == installed
    assert compat.adapter().family == compat.family_of(installed).first


def test_budget_auto_only_where_backends_read_their_own_widths():
    # auto's per-width verify backends read the width from their server args: the 0.5.16 family only, and every
    # family after it says so through the attribute it inherits (validation reads it, never a family's name)
    for release in SUPPORT_MATRIX:
        a = compat.adapter_for(release)
        assert a.budget_auto == (not a.reads_spec_process_wide) == (a.family == "0.5.16"), release


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
    """DFlashWorkerV2.__init__ runs inside the drafter's widths with the arguments upstream's signature names:
    the parallel state up to 0.5.20, none from 0.5.21 (the scheduler passes none; the DDTREE worker gets ps=None)."""
    import inspect

    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    takes_ps = "ps" in inspect.signature(DFlashWorkerV2.__init__).parameters
    a, seen = compat.adapter(), []
    monkeypatch.setattr(type(a), "drafter_widths", lambda self, config: _Recorder(seen, config))
    a.init_dflash_worker(_Worker(seen).init, "view", "cfg", 0, "ps" if takes_ps else None, 1234, "tw")
    assert seen[0] == ("enter", "cfg") and seen[-1] == ("exit", "cfg")
    assert seen[1] == ("init", ("view", 0, "ps", 1234, "tw") if takes_ps else ("view", 0, 1234, "tw"))


def test_the_draft_cuda_graphs_are_captured_in_the_drafters_widths(monkeypatch):
    """DFLASH's init_cuda_graphs captures the draft graphs (from 0.5.17 they read the widths process-wide: captured
    in the target's, a budget-64 tree's 65 rows per request met the draft head's 16, seen on the H200); DDTREE's
    runs it inside ``drafter_widths`` and its own draft-KV graphs after."""
    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    from sglang_ddtree.config import DDTreeConfig
    from sglang_ddtree.worker import worker as worker_mod

    a, seen = compat.adapter(), []
    monkeypatch.setattr(type(a), "drafter_widths", lambda self, config: _Recorder(seen, config))
    monkeypatch.setattr(DFlashWorkerV2, "init_cuda_graphs", lambda self: seen.append(("draft graphs",)))
    monkeypatch.setattr(worker_mod.DDTreeWorker, "_init_draft_kv_graphs", lambda self: seen.append(("kv graphs",)))
    monkeypatch.setattr(worker_mod.DDTreeWorker, "_warm_round_kernels", lambda self: seen.append(("warm-up",)))
    monkeypatch.setattr(worker_mod.DDTreeWorker, "_init_heads", lambda self: seen.append(("heads",)))
    w = worker_mod.DDTreeWorker.__new__(worker_mod.DDTreeWorker)
    w.config = DDTreeConfig(budget=64, topk=8, block_size=16)
    monkeypatch.setenv("SGLANG_DDTREE_WARMUP", "1")  # the start-up warm-up of the round's kernels, then the heads
    monkeypatch.delenv("SGLANG_DDTREE_HEAD_GRAPH", raising=False)  # on by default (session 41)
    w.init_cuda_graphs()
    drafts = [("enter", w.config), ("draft graphs",), ("exit", w.config), ("kv graphs",)]
    assert seen == drafts + [("warm-up",), ("heads",)]
    seen.clear()
    monkeypatch.delenv("SGLANG_DDTREE_WARMUP")  # on by default
    w.init_cuda_graphs()
    assert seen == drafts + [("warm-up",), ("heads",)]
    seen.clear()
    monkeypatch.setenv("SGLANG_DDTREE_WARMUP", "0")
    monkeypatch.setenv("SGLANG_DDTREE_HEAD_GRAPH", "0")
    w.init_cuda_graphs()
    assert seen == drafts


@pytest.mark.parametrize("phase", ["alloc_memory_pool", "init_attention_backends", "init_cuda_graphs"])
def test_the_scheduler_sets_the_draft_runner_up_in_the_drafters_widths(monkeypatch, phase):
    """The scheduler's three set-up calls on the draft worker after construction (pool, attention backends, CUDA
    graphs) reach upstream's DFLASH code in the drafter's widths. From 0.5.17 fa3's draft backend reads the width
    from ``get_spec()`` in ``init_attention_backends``: unscoped it took the target's 16 rows per request for the
    drafter's 8 and the draft graph capture wrote past its buffers (illegal address on the H200, 0.5.17)."""
    import contextlib

    from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2

    from sglang_ddtree.config import DDTreeConfig
    from sglang_ddtree.worker import worker as worker_mod

    a, seen = compat.adapter(), []
    # the admission window's start-up line (alloc_memory_pool, on by default) needs a TP group: not this test's subject
    monkeypatch.setenv("SGLANG_DDTREE_ADMIT_WAIT", "0")
    if a.reads_spec_process_wide:
        from sglang.srt.runtime_context import get_context, get_spec

        widths = lambda: (get_spec().speculative_num_draft_tokens, get_spec().speculative_eagle_topk)  # noqa: E731
        target = get_context().override_server_args(speculative_num_draft_tokens=16, speculative_eagle_topk=4)
    else:  # the draft runner reads its own copy of the server args; the scope is entered all the same
        monkeypatch.setattr(type(a), "drafter_widths", lambda self, config: _Recorder(seen, config))
        widths, target = (lambda: "upstream"), contextlib.nullcontext()
    monkeypatch.setattr(DFlashWorkerV2, phase, lambda self, *args, **kwargs: seen.append((phase, args, widths())))
    monkeypatch.setattr(worker_mod.DDTreeWorker, "_init_draft_kv_graphs", lambda self: None)
    monkeypatch.setattr(worker_mod.DDTreeWorker, "_warm_round_kernels", lambda self: None)
    monkeypatch.setattr(worker_mod.DDTreeWorker, "_init_heads", lambda self: None)
    w = worker_mod.DDTreeWorker.__new__(worker_mod.DDTreeWorker)
    w.config = DDTreeConfig(budget=15, topk=4, block_size=8)
    with target:
        getattr(w, phase)(*(("pool_config",) if phase == "alloc_memory_pool" else ()))
        if a.reads_spec_process_wide:
            assert widths() == (16, 4)  # the target's again after the call
    args = ("pool_config",) if phase == "alloc_memory_pool" else ()
    if a.reads_spec_process_wide:
        assert seen == [(phase, args, (8, 1))]
    else:
        assert seen == [("enter", w.config), (phase, args, "upstream"), ("exit", w.config)]


class _Worker:
    """Stands in for the DDTREE worker: an adapter gets its bound ``DFlashWorkerV2.__init__`` (``init``)."""

    def __init__(self, seen, processor=None):
        self.seen, self.processor = seen, processor

    def init(self, *args):
        self.seen.append(("init", args))
        if self.processor is not None:  # what 0.5.23's DFlashWorkerV2.__init__ does
            self._target_logits_processor = self.processor
            self.processor.defer_verify_gather = True


@pytest.mark.parametrize("release, takes_ps", [("0.5.20", True), ("0.5.21", False), ("0.5.23", False)])
def test_the_parallel_state_is_passed_up_to_0_5_20(monkeypatch, release, takes_ps):
    import contextlib

    a, seen = compat.adapter_for(release), []
    monkeypatch.setattr(type(a), "drafter_widths", lambda self, config: contextlib.nullcontext())
    a.init_dflash_worker(_Worker(seen).init, "view", "cfg", 0, "ps" if takes_ps else None, 1, "tw")
    assert seen == [("init", ("view", 0, "ps", 1, "tw") if takes_ps else ("view", 0, 1, "tw"))]
    if not takes_ps:
        with pytest.raises(AssertionError, match="no parallel state"):
            a.init_dflash_worker(_Worker([]).init, "view", "cfg", 0, "ps", 1, "tw")


@pytest.mark.parametrize("release, deferred", [("0.5.22", True), ("0.5.23", False)])
def test_0_5_23_turns_the_deferred_verify_gather_off_again(monkeypatch, release, deferred):
    """0.5.23's DFlashWorkerV2.__init__ defers the target's verify logits gather (a vocab shard under TP > 1); the
    DDTREE worker reads whole rows, so the adapter turns it off after the init (earlier releases never defer)."""
    import contextlib

    a, processor = compat.adapter_for(release), types.SimpleNamespace(defer_verify_gather=False)
    monkeypatch.setattr(type(a), "drafter_widths", lambda self, config: contextlib.nullcontext())
    a.init_dflash_worker(_Worker([], processor).init, "view", "cfg", 0, None, 1, "tw")
    assert processor.defer_verify_gather is deferred


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


def test_result_processor_server_args_by_release():
    """Up to 0.5.18 the result processor carries its server args; from 0.5.19 it has none and the published ones
    are read (the scheduler publishes its args before any batch is processed)."""
    from sglang.srt.runtime_context import get_context

    processor = types.SimpleNamespace(server_args="own")
    assert compat.adapter_for("0.5.18").result_processor_server_args(processor) == "own"
    with get_context().override_server_args(speculative_num_draft_tokens=4) as published:
        assert compat.adapter_for("0.5.19").result_processor_server_args(processor) is published


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


def _declare_resolution(server_args, source, **fields):
    """0.5.19's ``overrides.declare_resolution``: an entry in the record's declaration stash, no field written."""
    stash = getattr(server_args, "_resolved_overrides", None)
    if stash is None:
        stash = server_args._resolved_overrides = []
    stash.append((source, dict(fields)))


def _unresolved_ddtree_args(**fields):
    from sglang.srt.model_executor.cuda_graph_config import CudaGraphConfig, PhaseConfig

    graphs = CudaGraphConfig(decode=PhaseConfig(backend="breakable", bs=[1, 2, 4]),
                             prefill=PhaseConfig(backend="breakable", bs=[4, 8]))
    return types.SimpleNamespace(**{
        "cuda_graph_config": graphs,
        "speculative_algorithm": "DDTREE", "speculative_draft_model_path": "drafter", "speculative_ddtree_budget": None,
        "speculative_ddtree_topk": None, "speculative_num_draft_tokens": None, "speculative_eagle_topk": None,
        "speculative_num_steps": None, "speculative_dflash_block_size": None, "speculative_draft_window_size": None,
        "speculative_adaptive": False, "speculative_draft_attention_backend": None, "device": "cuda", "pp_size": 1,
        "tp_size": 1, "page_size": 1, "enable_dp_attention": False, "attention_backend": "triton",
        "prefill_attention_backend": None, "decode_attention_backend": None, "disaggregation_mode": "null", **fields})


@pytest.mark.parametrize("release", ["0.5.16", "0.5.18", "0.5.19", "0.5.20"])
def test_ddtree_widths_are_the_resolution_result(monkeypatch, release):
    """From 0.5.19 resolution declares: ``_handle_dflash`` puts the drafter's widths (verify width = block size L,
    topk 1) in the record's stash and leaves the fields raw, and the config bags are projected from the stash (last
    writer wins). DDTREE's widths must then be declared after them, and be on the record too, where
    ``DDTreeConfig.from_server_args`` reads them. Before 0.5.19 the record's fields are the result (plain writes);
    from 0.5.20 DDTREE is handed a stand-in whose plain writes upstream declares (record_foreign_defaults).
    Upstream's pipeline is stood in (with 0.5.19's semantics), so this runs against every release."""
    from sglang.srt.arg_groups import overrides, speculative_hook

    from sglang_ddtree import validation
    from sglang_ddtree.config import DDTreeConfig
    from sglang_ddtree.worker import fa3_tree

    a = compat.adapter_for(release)
    declares = a.family == "0.5.19"
    monkeypatch.setattr(compat, "adapter", lambda: a)
    monkeypatch.setenv(fa3_tree.ENV, "")
    if not hasattr(overrides, "declare_resolution"):  # releases before 0.5.19
        monkeypatch.setattr(overrides, "declare_resolution", _declare_resolution, raising=False)

    def handle_dflash(server_args):
        widths = dict(speculative_num_steps=1, speculative_eagle_topk=1, speculative_num_draft_tokens=16)
        if declares:
            _declare_resolution(server_args, "_handle_dflash", **widths)
        else:
            vars(server_args).update(widths)

    monkeypatch.setattr(speculative_hook, "_handle_dflash", handle_dflash)
    server_args = _unresolved_ddtree_args()
    config = validation.handle_ddtree_server_args(server_args)

    # no budget given: auto on 0.5.16 (its default there, on triton at tp 1 / page 1), 64 on the other releases
    auto = a.family == "0.5.16"
    expected = dict(speculative_ddtree_budget="auto" if auto else 64, speculative_ddtree_topk=8,
                    speculative_dflash_block_size=16, speculative_num_steps=1, speculative_eagle_topk=8,
                    speculative_num_draft_tokens=64 if auto else 65)
    view = overrides.resolved_view(server_args)  # the declarations over the fields: what the projection reads
    assert {name: getattr(view, name) for name in expected} == expected
    assert {name: getattr(server_args, name) for name in expected} == expected
    # the target's prefill graphs from 1 token (a triton target), resolved the same way
    assert view.cuda_graph_config.prefill.bs == server_args.cuda_graph_config.prefill.bs == [1, 2, 4, 8]
    want = DDTreeConfig(63, 8, 16, adaptive=True) if auto else DDTreeConfig(64, 8, 16)
    assert config == want == DDTreeConfig.from_server_args(server_args)
    declared = [source for source, _ in getattr(server_args, "_resolved_overrides", ())]
    assert declared == ([validation._SOURCE, "_handle_dflash", validation._SOURCE] if declares else [])


def test_resolution_after_construction_by_release():
    calls = []
    server_args = types.SimpleNamespace(resolve_once=lambda: calls.append("resolve_once"))
    compat.adapter_for("0.5.18").resolve(server_args)  # ServerArgs.__post_init__ resolved already
    assert calls == []
    compat.adapter_for("0.5.19").resolve(server_args)
    assert calls == ["resolve_once"]


@pytest.mark.parametrize("algorithm, resolved", [("DDTREE", True), ("EAGLE", False), (None, False)])
def test_cli_parsing_resolves_ddtree_args_inside_the_one_line_error_hook(monkeypatch, capsys, algorithm, resolved):
    """From 0.5.19 ``prepare_server_args`` returns the raw input (``run_server`` resolves right after); the hook
    resolves a DDTREE configuration through the adapter, so a DDTREE error is still one line and exit status 2."""
    from sglang_ddtree.config import DDTreeArgumentError
    from sglang_ddtree.server_args import prepare_server_args_one_line_errors

    a, seen = compat.adapter_for("0.5.19"), []
    monkeypatch.setattr(compat, "adapter", lambda: a)
    monkeypatch.setattr(a, "resolve", lambda server_args: seen.append(server_args))
    parsed = types.SimpleNamespace(speculative_algorithm=algorithm)
    assert prepare_server_args_one_line_errors(lambda argv: parsed, ["argv"]) is parsed
    assert seen == ([parsed] if resolved else [])
    if not resolved:
        return

    def refuse(server_args):
        raise DDTreeArgumentError("--speculative-ddtree-budget must be in [1, 1024], got 0.")

    monkeypatch.setattr(a, "resolve", refuse)
    with pytest.raises(SystemExit) as e:
        prepare_server_args_one_line_errors(lambda argv: parsed, ["argv"])
    assert e.value.code == 2
    assert capsys.readouterr().err == "sglang: error: --speculative-ddtree-budget must be in [1, 1024], got 0.\n"


def test_0_5_19_drafter_copy_declares_its_widths(monkeypatch):
    """A resolved 0.5.19 record's stash declares the target's widths (65, 8); the drafter's copy gets (16, 1) on its
    fields and, declared last, in its stash, where upstream's resolving_view reads them (a stand-in record)."""
    from sglang.srt.arg_groups import overrides

    if not hasattr(overrides, "declare_resolution"):  # releases before 0.5.19
        monkeypatch.setattr(overrides, "declare_resolution", _declare_resolution, raising=False)
    widths = ("speculative_num_draft_tokens", "speculative_eagle_topk")
    copy = types.SimpleNamespace(speculative_num_draft_tokens=65, speculative_eagle_topk=8,
                                 _resolved_overrides=[("ddtree", {"speculative_num_draft_tokens": 65,
                                                                  "speculative_eagle_topk": 8})])
    compat.adapter_for("0.5.19").write_fields(copy, "ddtree.draft_view", dict(zip(widths, (16, 1))))
    view = overrides.resolved_view(copy)
    assert [getattr(copy, n) for n in widths] == [getattr(view, n) for n in widths] == [16, 1]

