"""The DDTREE flags through SGLang's own argument paths (CLI parsing and ``Engine`` keyword
arguments): the mapping onto native fields, and every bad input failing fast with a message that
names the flag, the value and what is allowed. Only config.json files are needed, no GPU."""

import logging
import re
import sys

import pytest

pytest.importorskip("sglang")

DDTREE = ["--speculative-algorithm", "DDTREE"]


def _installed_at_least(release):
    from importlib.metadata import version

    from packaging.version import Version

    return Version(version("sglang")) >= Version(release)


@pytest.fixture
def parse(sglang_with_plugin, tiny_configs):
    """prepare_server_args exactly as `python -m sglang.launch_server` calls it, then the resolution the
    launcher runs before reading the result (from SGLang 0.5.19 a separate step: compat adapter ``resolve``)."""
    from sglang.srt.server_args import prepare_server_args

    from sglang_ddtree.compat import adapter

    def _parse(*extra, target=None):
        argv = ["--model-path", target or tiny_configs["target"], "--device", "cuda", "--skip-tokenizer-init"]
        # prepare_server_args sets up logging (basicConfig(force=True)) after parsing, and a deprecated flag warns
        # while parsing (0.5.22: --enable-dp-attention): through a root handler an earlier test's call left on that
        # test's captured, now closed, stderr.
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and getattr(handler.stream, "closed", False):
                handler.stream = sys.stderr  # (setStream would flush the closed one first)
        server_args = prepare_server_args(argv + list(extra))
        adapter().resolve(server_args)
        return server_args

    return _parse


@pytest.fixture
def ddtree_logs():
    """Records of the sglang_ddtree loggers. (pytest's caplog cannot be used: prepare_server_args
    calls logging.basicConfig(force=True), which removes handlers from the root logger.)"""

    class _Records(logging.Handler):
        def __init__(self):
            super().__init__(logging.DEBUG)
            self.records = []

        def emit(self, record):
            self.records.append(record)

        @property
        def text(self):
            return "\n".join(r.getMessage() for r in self.records)

    handler = _Records()
    logger = logging.getLogger("sglang_ddtree")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(old_level)


@pytest.fixture
def engine_args(sglang_with_plugin, tiny_configs):
    """The server-args class sglang.Engine(**kwargs) constructs, resolved as the engine resolves it before
    launching (compat adapter ``resolve``)."""
    from sglang.srt.entrypoints.engine import Engine

    from sglang_ddtree.compat import adapter

    def _make(**kwargs):
        base = dict(model_path=tiny_configs["target"], device="cuda", skip_tokenizer_init=True)
        server_args = Engine.server_args_class(**{**base, **kwargs})
        adapter().resolve(server_args)
        return server_args

    return _make


def resolved(server_args):
    """What resolution decided: upstream's ``resolved_view`` (the declarations over the fields). Up to 0.5.18 the
    fields are the result; 0.5.19 declares and writes both; from 0.5.20 a record's fields keep the raw input, and
    only the declarations (what the config bags are projected from) carry DDTREE's resolution."""
    from sglang.srt.arg_groups.overrides import resolved_view

    return resolved_view(server_args)


def test_defaults_map_onto_native_fields(parse, tiny_configs, ddtree_logs):
    """No budget given: auto where it is the default (SGLang 0.5.16 here: triton, tp 1, page 1), else 64, and the
    start-up log says which and why."""
    from sglang_ddtree.compat import adapter

    sa = parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter"])
    view = resolved(sa)
    auto = adapter().family == "0.5.16"
    assert view.speculative_algorithm == "DDTREE"
    assert (view.speculative_ddtree_budget, view.speculative_ddtree_topk) == ("auto" if auto else 64, 8)
    assert view.speculative_num_draft_tokens == (64 if auto else 65)  # the (largest) budget + root
    assert view.speculative_eagle_topk == 8
    assert view.speculative_num_steps == 1
    assert view.speculative_dflash_block_size == 16  # read from the drafter's config
    # From 0.5.19 _handle_dflash declared the drafter's widths 16 / 1 first; DDTREE's declaration is the later one.
    assert sa.attention_backend == view.attention_backend == "triton"
    assert "no --attention-backend given; using 'triton'" in ddtree_logs.text
    if auto:
        assert "no --speculative-ddtree-budget given; using auto, the default here" in ddtree_logs.text
        assert "budget=auto (buckets [0, 1, 3, 7, 15, 31, 63]) topk=8 drafter block size=16" in ddtree_logs.text
    else:
        assert (f"no --speculative-ddtree-budget given; using 64 (the default is auto only at --tp-size 1, "
                f"--page-size 1, fa3 (DDTREE's fused tree attention) or triton, SGLang 0.5.16; here SGLang release "
                f"family {adapter().family})") in ddtree_logs.text
        assert "budget=64 topk=8 drafter block size=16" in ddtree_logs.text


def test_a_given_budget_is_kept_and_says_nothing_about_the_default(parse, tiny_configs, ddtree_logs):
    from sglang_ddtree.compat import adapter

    given_auto = (("auto", "auto"),) if adapter().family == "0.5.16" else ()  # refused on later releases
    for given, want in (("64", 64), ("15", 15)) + given_auto:
        sa = parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter"], "--speculative-ddtree-budget",
                   given)
        assert resolved(sa).speculative_ddtree_budget == want
    assert "no --speculative-ddtree-budget given" not in ddtree_logs.text


def test_auto_is_the_default_only_where_its_gpu_checks_ran(monkeypatch):
    """``auto_default_unverified``: None (auto is the default) at tp 1, page 1, triton or fa3 with DDTREE's fused tree
    attention, on the 0.5.16 family; elsewhere the reason the start-up log gives for 64."""
    import types

    from sglang_ddtree import compat, validation
    from sglang_ddtree.worker import fa3_tree

    def args(**fields):
        base = dict(tp_size=1, page_size=None, attention_backend="triton", prefill_attention_backend=None,
                    decode_attention_backend=None)
        return types.SimpleNamespace(**dict(base, **fields))

    monkeypatch.setattr(compat, "adapter", lambda: compat.adapter_for("0.5.16"))
    monkeypatch.setattr(fa3_tree, "enabled", lambda: True)
    why = validation.auto_default_unverified
    assert why(args()) is None and why(args(page_size=1)) is None and why(args(attention_backend="fa3")) is None
    assert why(args(tp_size=2)) == "--tp-size 2"
    assert why(args(page_size=16)) == "--page-size 16"
    assert why(args(attention_backend="flashinfer")) == "the prefill attention backend is 'flashinfer'"
    assert why(args(decode_attention_backend="flashinfer")) == "the decode attention backend is 'flashinfer'"
    assert why(args(attention_backend=None)) == "the prefill attention backend is 'None'"
    monkeypatch.setattr(fa3_tree, "enabled", lambda: False)
    assert why(args(attention_backend="fa3")).startswith("fa3 verifies trees with upstream's cascade")
    assert why(args()) is None
    monkeypatch.setattr(compat, "adapter", lambda: compat.adapter_for("0.5.23"))
    assert why(args()) == "SGLang release family 0.5.23"


def test_the_record_crosses_a_process_boundary_resolved(parse, tiny_configs):
    """The scheduler subprocesses get the launcher's record by pickle: DDTREE's fields and its resolution survive
    (from 0.5.20 the pickle rebuilds the Struct through its constructor, which re-runs DDTREE's early checks,
    then restores the declaration stash)."""
    import pickle

    sa = parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter8"], "--speculative-ddtree-budget", "15",
               "--speculative-ddtree-topk", "4")
    copy = pickle.loads(pickle.dumps(sa))
    assert type(copy) is type(sa) and type(sa).__name__ == "DDTreeServerArgs"
    names = ("speculative_ddtree_budget", "speculative_ddtree_topk", "speculative_num_draft_tokens",
             "speculative_eagle_topk", "speculative_dflash_block_size")
    assert [getattr(resolved(copy), n) for n in names] == [getattr(resolved(sa), n) for n in names] == [15, 4, 16, 4, 8]


@pytest.mark.skipif(not _installed_at_least("0.5.20"), reason="ServerArgs is a msgspec Struct from SGLang 0.5.20")
def test_from_0_5_20_the_flags_are_struct_fields_in_the_spec_namespace(sglang_with_plugin):
    """DDTreeServerArgs is a Struct subclass whose two fields join the ``spec`` namespace, so the published config
    bag carries DDTREE's resolved values (``get_spec()``), as it carries every upstream speculative field."""
    import msgspec
    from sglang.srt.arg_groups.arg_utils import namespace_of
    from sglang.srt.runtime_context import get_context, get_spec
    from sglang.srt.server_args import ServerArgs

    assert ServerArgs.__name__ == "DDTreeServerArgs" and issubclass(ServerArgs, msgspec.Struct)
    assert ServerArgs.__struct_fields__[-2:] == ("speculative_ddtree_budget", "speculative_ddtree_topk")
    spaces = namespace_of(ServerArgs)
    assert spaces["speculative_ddtree_budget"] == spaces["speculative_ddtree_topk"] == "spec"
    assert spaces["speculative_num_draft_tokens"] == "spec"  # upstream's own, unchanged
    with get_context().override_server_args(speculative_ddtree_budget=32, speculative_ddtree_topk=2):
        assert (get_spec().speculative_ddtree_budget, get_spec().speculative_ddtree_topk) == (32, 2)


@pytest.mark.skipif(not _installed_at_least("0.5.20"), reason="the record is sealed from SGLang 0.5.20")
def test_from_0_5_20_the_record_keeps_the_input_and_the_stash_the_resolution(engine_args, tiny_configs):
    """Resolution never writes a 0.5.20 record: DDTREE's writes on the stand-in upstream hands its
    handle_server_args are declared under upstream's custom-algorithm source, after _handle_dflash's widths."""
    sa = engine_args(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"],
                     speculative_ddtree_topk=16, speculative_ddtree_budget=4)
    assert (sa.speculative_ddtree_budget, sa.speculative_ddtree_topk, sa.speculative_num_draft_tokens) == (4, 16, None)
    assert (resolved(sa).speculative_ddtree_topk, resolved(sa).speculative_num_draft_tokens) == (4, 5)
    sources = [source for source, fields in sa._resolved_overrides if "speculative_num_draft_tokens" in fields]
    assert sources[-1] == "handle_speculative_decoding.custom_algo"
    with pytest.raises(AttributeError, match="assigned after resolution"):
        sa.speculative_ddtree_budget = 8


def test_explicit_values_and_block_size_from_drafter(parse, tiny_configs):
    sa = parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter8"],
               "--speculative-ddtree-budget", "15", "--speculative-ddtree-topk", "4",
               "--attention-backend", "flashinfer")
    view = resolved(sa)
    assert (view.speculative_num_draft_tokens, view.speculative_eagle_topk, view.speculative_dflash_block_size) == (16, 4, 8)
    assert sa.attention_backend == "flashinfer"


def test_budget_is_independent_of_block_size(parse, tiny_configs):
    sa = parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter8"], "--speculative-ddtree-budget", "256")
    assert resolved(sa).speculative_num_draft_tokens == 257 and resolved(sa).speculative_dflash_block_size == 8
    sa = parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter"], "--speculative-ddtree-budget", "1")
    assert resolved(sa).speculative_num_draft_tokens == 2 and resolved(sa).speculative_eagle_topk == 1


def test_topk_above_budget_is_capped_with_one_warning(parse, tiny_configs, ddtree_logs):
    sa = parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter"],
               "--speculative-ddtree-budget", "4", "--speculative-ddtree-topk", "16")
    assert resolved(sa).speculative_ddtree_topk == 4 and resolved(sa).speculative_eagle_topk == 4
    warnings = [r for r in ddtree_logs.records if "exceeds --speculative-ddtree-budget" in r.getMessage()]
    assert len(warnings) == 1
    assert "using --speculative-ddtree-topk=4" in warnings[0].getMessage()


def _auto_supported():
    from sglang_ddtree.compat import adapter

    return adapter().family == "0.5.16"


needs_auto_release = pytest.mark.skipif(not _auto_supported(),
                                        reason="budget auto is refused on SGLang families after 0.5.16 "
                                               "(test_budget_auto_refuses_releases_whose_backends_read_get_spec)")


@needs_auto_release
@pytest.mark.parametrize("value", ["auto", "AUTO"])
def test_budget_auto_sizes_every_shape_by_the_largest_bucket(parse, engine_args, tiny_configs, ddtree_logs, value):
    from sglang_ddtree.config import AUTO_MAX_BUDGET, DDTreeConfig

    for sa in (parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter"],
                     "--speculative-ddtree-budget", value),
               engine_args(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"],
                           speculative_ddtree_budget=value)):
        view = resolved(sa)
        assert view.speculative_ddtree_budget == "auto"  # what the user asked for, kept
        assert view.speculative_num_draft_tokens == AUTO_MAX_BUDGET + 1 and view.speculative_eagle_topk == 8
        cfg = DDTreeConfig.from_server_args(sa)
        assert cfg.adaptive and cfg.budget == AUTO_MAX_BUDGET and cfg.buckets == (0, 1, 3, 7, 15, 31, 63)
    assert "budget=auto (buckets [0, 1, 3, 7, 15, 31, 63])" in ddtree_logs.text


@needs_auto_release
@pytest.mark.parametrize("value, largest", [("auto:31", 31), ("AUTO:7", 7), ("auto:63", 63), ("auto: 20", 20)])
def test_budget_auto_with_its_largest_bucket_named(parse, engine_args, tiny_configs, value, largest):
    """``auto:N``: budget auto whose buckets stop at N (what validation writes for a hybrid target whose per-row
    states would not fit with 63); canonical form kept, every width sized by N."""
    from sglang_ddtree.config import DDTreeConfig, bucket_budgets

    for sa in (parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter"],
                     "--speculative-ddtree-budget", value),
               engine_args(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"],
                           speculative_ddtree_budget=value)):
        view = resolved(sa)
        assert view.speculative_ddtree_budget == ("auto" if largest == 63 else f"auto:{largest}")
        assert view.speculative_num_draft_tokens == largest + 1 and view.speculative_eagle_topk == min(8, largest)
        cfg = DDTreeConfig.from_server_args(sa)
        assert cfg.adaptive and cfg.budget == largest and cfg.buckets == bucket_budgets(largest)


@pytest.mark.parametrize("value", ["auto:0", "auto:64", "auto:x", "auto:"])
def test_budget_auto_with_a_bad_largest_bucket_is_one_line(engine_args, tiny_configs, value):
    with pytest.raises(ValueError, match=rf"^--speculative-ddtree-budget '{value}': 'auto:N' is budget auto with "
                                         r"buckets up to N, an integer in \[1, 63\]\.$"):
        engine_args(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"],
                    speculative_ddtree_budget=value)


@needs_auto_release
def test_budget_auto_on_a_hybrid_target_stops_its_buckets_where_the_states_fit(engine_args, tiny_configs,
                                                                               hybrid_target, ddtree_logs,
                                                                               monkeypatch):
    """Plain ``auto`` on a hybrid target: validation asks ``hybrid_args.auto_largest_fitting_bucket`` (its numbers:
    test_hybrid_args.py) and, where the full set would not fit, resolves the budget to ``auto:N`` with one warning
    naming the numbers and how to change it; a user's ``auto:N`` and a dense target's ``auto`` are kept. (Upstream's
    own Mamba checks need a GPU, so the dense tiny target stands in with the hybrid config read instead.)"""
    from transformers import AutoConfig

    from sglang_ddtree import validation
    from sglang_ddtree.config import DDTreeConfig

    hybrid = AutoConfig.from_pretrained(hybrid_target)
    checked, fit = [], {"bucket": 7}
    monkeypatch.setattr(validation, "_target_hf_config", lambda sa: hybrid)
    monkeypatch.setattr(validation, "check_hybrid_server_args", lambda sa, cfg: checked.append(cfg))
    monkeypatch.setattr(validation, "auto_largest_fitting_bucket", lambda sa: (fit["bucket"], "NUMBERS"))
    kw = dict(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"])
    sa = engine_args(**kw, speculative_ddtree_budget="auto")
    view = resolved(sa)
    assert view.speculative_ddtree_budget == "auto:7"
    assert view.speculative_num_draft_tokens == 8 and view.speculative_ddtree_topk == 7 == view.speculative_eagle_topk
    cfg = DDTreeConfig.from_server_args(sa)
    assert cfg.buckets == (0, 1, 3, 7) and checked[-1] == cfg
    assert ("--speculative-ddtree-budget auto on this hybrid target verifies buckets up to 7 "
            "(--speculative-ddtree-budget=auto:7): every tree row keeps its own recurrent state, NUMBERS; give "
            "--speculative-ddtree-budget auto:N (N <= 63) or fewer --max-running-requests to change it.") in \
        ddtree_logs.text
    assert ("--speculative-ddtree-topk=8 exceeds budget auto's largest bucket 7 here; a node can have at most 7 "
            "children, using --speculative-ddtree-topk=7") in ddtree_logs.text
    assert resolved(engine_args(**kw, speculative_ddtree_budget="auto:31")).speculative_ddtree_budget == "auto:31"
    for bucket in (63, 0):  # all fit: auto as asked; none fits: left to check_hybrid_server_args' refusal
        fit["bucket"] = bucket
        assert resolved(engine_args(**kw, speculative_ddtree_budget="auto")).speculative_num_draft_tokens == 64
    monkeypatch.setattr(validation, "_target_hf_config", lambda sa: None)  # a dense target: never asked
    monkeypatch.setattr(validation, "auto_largest_fitting_bucket", lambda sa: pytest.fail("asked for a dense target"))
    assert resolved(engine_args(**kw, speculative_ddtree_budget="auto")).speculative_ddtree_budget == "auto"


needs_hybrid_release = pytest.mark.skipif(not _auto_supported(),
                                          reason="hybrid targets are served on SGLang 0.5.16 only "
                                                 "(hybrid_args.check_release)")


@needs_hybrid_release
def test_a_hybrid_target_without_a_budget_gets_its_own_default(engine_args, tiny_configs, hybrid_target,
                                                                ddtree_logs, monkeypatch):
    """No --speculative-ddtree-budget on a hybrid target: HYBRID_DEFAULT_BUDGET (15: DFLASH's verify width and state
    memory), logged; a topk above it capped with one warning; a budget the user gives is kept; dense targets get
    theirs (auto or DEFAULT_BUDGET). (The dense tiny target stands in with the hybrid config read, as above.)"""
    from transformers import AutoConfig

    from sglang_ddtree import validation
    from sglang_ddtree.config import DEFAULT_BUDGET, HYBRID_DEFAULT_BUDGET

    hybrid = AutoConfig.from_pretrained(hybrid_target)
    monkeypatch.setattr(validation, "_target_hf_config", lambda sa: hybrid)
    monkeypatch.setattr(validation, "check_hybrid_server_args", lambda sa, cfg: None)
    kw = dict(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"])
    view = resolved(engine_args(**kw))
    assert HYBRID_DEFAULT_BUDGET == 15
    assert view.speculative_ddtree_budget == 15 and view.speculative_num_draft_tokens == 16
    assert ("no --speculative-ddtree-budget given; using 15 on this hybrid target (every tree row keeps its own "
            "recurrent state; dense targets default to auto or 64)") in ddtree_logs.text
    view = resolved(engine_args(**kw, speculative_ddtree_topk=32))
    assert view.speculative_ddtree_topk == 15 == view.speculative_eagle_topk
    assert ("--speculative-ddtree-topk=32 exceeds this hybrid target's default --speculative-ddtree-budget=15; a node "
            "can have at most 15 children, using --speculative-ddtree-topk=15") in ddtree_logs.text
    assert resolved(engine_args(**kw, speculative_ddtree_budget=64)).speculative_num_draft_tokens == 65
    monkeypatch.setattr(validation, "_target_hf_config", lambda sa: None)  # a dense target: auto on 0.5.16 (triton)
    from sglang_ddtree.compat import adapter
    from sglang_ddtree.config import AUTO_MAX_BUDGET

    dense = AUTO_MAX_BUDGET if adapter().family == "0.5.16" else DEFAULT_BUDGET
    assert resolved(engine_args(**kw)).speculative_num_draft_tokens == dense + 1


@needs_auto_release
def test_budget_auto_with_tensor_parallelism_only_behind_its_switch(engine_args, tiny_configs, monkeypatch):
    """The ranks' agreement on each round's width is CPU-tested only (test_auto_width.py), so --tp-size > 1 with
    budget auto is a one-line refusal naming the switch unless SGLANG_DDTREE_EXPERIMENTAL_AUTO_TP=1."""
    kw = dict(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"],
              speculative_ddtree_budget="auto", tp_size=2)
    monkeypatch.delenv("SGLANG_DDTREE_EXPERIMENTAL_AUTO_TP", raising=False)
    with pytest.raises(ValueError, match=r"^--speculative-ddtree-budget auto with --tp-size 2 is not yet verified on "
                                         r"GPUs \(the ranks agree on every round's width, CPU-tested only\); use a "
                                         r"fixed budget, or set SGLANG_DDTREE_EXPERIMENTAL_AUTO_TP=1 to try it\.$"):
        engine_args(**kw)
    monkeypatch.setenv("SGLANG_DDTREE_EXPERIMENTAL_AUTO_TP", "1")
    assert resolved(engine_args(**kw)).tp_size == 2
    monkeypatch.setenv("SGLANG_DDTREE_EXPERIMENTAL_AUTO_TP", "on")
    with pytest.raises(ValueError, match=r"SGLANG_DDTREE_EXPERIMENTAL_AUTO_TP='on': use 1"):
        engine_args(**kw)


def test_full_prefill_graphs_are_refused_in_one_line(engine_args, tiny_configs):
    """Upstream's full prefill graph backend (the 0.5.16 family's --cuda-graph-backend-prefill full) drops the
    target's captured hidden states: every DDTREE engine failed at its first prefill (H100, session 49). Refused at
    start in one line; the default (breakable) and the other backends are kept."""
    import inspect

    from sglang.srt.server_args import ServerArgs

    from sglang_ddtree.compat import adapter

    if "cuda_graph_backend_prefill" not in inspect.signature(ServerArgs).parameters:
        pytest.skip(f"--cuda-graph-backend-prefill is not a flag of SGLang {adapter().version}")
    kw = dict(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"])
    with pytest.raises(ValueError, match=r"^--cuda-graph-backend-prefill full is not supported with "
                                         r"--speculative-algorithm DDTREE: .*; use breakable \(the default\), "
                                         r"tc_piecewise or disabled\.$"):
        engine_args(cuda_graph_backend_prefill="full", **kw)
    for backend in ("breakable", "disabled"):
        assert resolved(engine_args(cuda_graph_backend_prefill=backend, **kw)).speculative_algorithm == "DDTREE"


def test_a_malformed_admission_window_is_refused_in_one_line(engine_args, tiny_configs, monkeypatch):
    """SGLANG_DDTREE_ADMIT_WAIT (worker.admission, experimental) is read at validation: a value that is not a
    number of passes in 0 .. 64 stops the server at its start, in one line naming the variable and what is allowed."""
    kw = dict(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"])
    monkeypatch.setenv("SGLANG_DDTREE_ADMIT_WAIT", "often")
    with pytest.raises(ValueError, match=r"^SGLANG_DDTREE_ADMIT_WAIT='often': use the scheduler passes \(about decode "
                                         r"rounds\) an arrival may wait while a batch runs, 1 \.\. 64, or 0 for no "
                                         r"window\.$"):
        engine_args(**kw)
    monkeypatch.setenv("SGLANG_DDTREE_ADMIT_WAIT", "4")
    assert resolved(engine_args(**kw)).speculative_algorithm == "DDTREE"


def test_a_malformed_prefill_switch_is_refused_in_one_line(engine_args, tiny_configs, monkeypatch):
    """SGLANG_DDTREE_PREFILL_ASYNC (worker.prefill, experimental) is read at validation too."""
    kw = dict(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"])
    monkeypatch.setenv("SGLANG_DDTREE_PREFILL_ASYNC", "on")
    with pytest.raises(ValueError, match=r"^SGLANG_DDTREE_PREFILL_ASYNC='on': use 1 \(DDTREE's prefill without the "
                                         r"host wait \(0\.5\.16 family\)\) or 0 \(upstream's prefill\)\.$"):
        engine_args(**kw)
    monkeypatch.setenv("SGLANG_DDTREE_PREFILL_ASYNC", "1")
    assert resolved(engine_args(**kw)).speculative_algorithm == "DDTREE"


def test_engine_kwargs_are_accepted(engine_args, tiny_configs):
    sa = engine_args(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"],
                     speculative_ddtree_budget=32, speculative_ddtree_topk=2)
    assert (resolved(sa).speculative_num_draft_tokens, resolved(sa).speculative_eagle_topk) == (33, 2)
    assert (sa.speculative_ddtree_budget, sa.speculative_ddtree_topk) == (32, 2)  # the input, on the record


def _fa3_tree_path_carried():
    from sglang_ddtree.worker import fa3_tree

    return fa3_tree.release_supported()


_PAGED_HEAD = (r"supports --page-size {} only with a fixed budget and one --attention-backend of fa3 / triton / "
               r"flashinfer for the target and the drafter for now, but ")
_PAGED_TAIL = r" \(use --page-size 1, or set SGLANG_DDTREE_EXPERIMENTAL_PAGED=1 to try it: not yet verified on a GPU\)\.$"


@pytest.mark.parametrize("page_size", [16, 64])
def test_page_size_above_1_on_one_verified_backend_with_a_fixed_budget(parse, tiny_configs, capsys, monkeypatch,
                                                                        page_size):
    """The GPU-verified configurations take --page-size > 1 without the experimental switch: one of triton /
    flashinfer / fa3 (fa3 with DDTREE's fused tree attention, where the release carries it) for the target's prefill
    and decode, the drafter's backend unset or the same, a fixed budget. Anything else is a one-line error naming
    what is outside them."""
    monkeypatch.delenv("SGLANG_DDTREE_EXPERIMENTAL_PAGED", raising=False)
    monkeypatch.delenv("SGLANG_DDTREE_FA3_TREE_ATTENTION", raising=False)
    args = (*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter"], "--page-size", str(page_size))
    backends = ["triton", "flashinfer"] + (["fa3"] if _fa3_tree_path_carried() else [])
    for backend in backends:
        view = resolved(parse(*args, "--attention-backend", backend))
        assert (view.page_size, view.attention_backend) == (page_size, backend)
        assert resolved(parse(*args, "--attention-backend", backend, "--speculative-draft-attention-backend",
                              backend)).page_size == page_size
    head = _PAGED_HEAD.format(page_size)
    for extra, why in [
        (["--attention-backend", "triton", "--decode-attention-backend", "flashinfer"],
         "the prefill and decode attention backends differ ('triton', 'flashinfer')"),
        (["--attention-backend", "flashinfer", "--speculative-draft-attention-backend", "triton"],
         "--speculative-draft-attention-backend is 'triton' (the target's is 'flashinfer')"),
    ]:
        _one_line_cli_error(capsys, lambda: parse(*args, *extra), head + re.escape(why) + _PAGED_TAIL)
    if _fa3_tree_path_carried():
        monkeypatch.setenv("SGLANG_DDTREE_FA3_TREE_ATTENTION", "0")
        _one_line_cli_error(capsys, lambda: parse(*args, "--attention-backend", "fa3"),
                            head + r"fa3 verifies trees with upstream's cascade here \(SGLANG_DDTREE_FA3_TREE_ATTENTION "
                            r"off")
        monkeypatch.delenv("SGLANG_DDTREE_FA3_TREE_ATTENTION")
    if _auto_supported():
        for backend in backends:
            _one_line_cli_error(capsys, lambda: parse(*args, "--attention-backend", backend,
                                                      "--speculative-ddtree-budget", "auto"),
                                head + r"--speculative-ddtree-budget is auto" + _PAGED_TAIL)


@pytest.mark.parametrize("page_size", [16, 64])
def test_page_size_above_1_behind_the_experimental_switch(parse, tiny_configs, capsys, monkeypatch, page_size):
    """``SGLANG_DDTREE_EXPERIMENTAL_PAGED=1`` lets --page-size > 1 through beyond the verified configurations (here
    mixed prefill / decode backends; the page size reaches SGLang as given); a value other than 0 / 1 is a one-line
    error naming the variable."""
    args = (*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter"], "--attention-backend", "triton",
            "--decode-attention-backend", "flashinfer", "--page-size", str(page_size))
    monkeypatch.setenv("SGLANG_DDTREE_EXPERIMENTAL_PAGED", "1")
    sa = parse(*args)
    from sglang_ddtree.config import DEFAULT_BUDGET

    view = resolved(sa)
    assert (view.page_size, view.speculative_num_draft_tokens) == (page_size, DEFAULT_BUDGET + 1)
    monkeypatch.setenv("SGLANG_DDTREE_EXPERIMENTAL_PAGED", "yes")
    _one_line_cli_error(capsys, lambda: parse(*args), r"SGLANG_DDTREE_EXPERIMENTAL_PAGED='yes': use 1 \(--page-size > 1 "
                        r"allowed beyond the GPU-verified configurations \(experimental\)\) or 0")
    monkeypatch.setenv("SGLANG_DDTREE_EXPERIMENTAL_PAGED", "0")
    _one_line_cli_error(capsys, lambda: parse(*args), _PAGED_HEAD.format(page_size)
                        + re.escape("the prefill and decode attention backends differ ('triton', 'flashinfer')"))


def test_prefill_graphs_start_at_one_token_unless_the_user_chose_them(parse, engine_args, tiny_configs, ddtree_logs,
                                                                     hybrid_target, monkeypatch):
    """DDTREE puts 1 and 2 tokens in front of upstream's breakable prefill graph sizes (which start at 4) on a dense
    triton or fa3 target, says so once a server, and leaves a list the user gave, another prefill graph backend, another attention
    backend, a hybrid target and a plain server as they are."""
    from sglang_ddtree.validation import SMALL_PREFILL_GRAPH_BACKENDS, SMALL_PREFILL_GRAPH_TOKENS

    breakable = ("--cuda-graph-backend-prefill", "breakable")
    drafter = ("--speculative-draft-model-path", tiny_configs["drafter"])
    upstream = resolved(parse(*breakable)).cuda_graph_config.prefill.bs
    assert min(upstream) == 4 and not ddtree_logs.text
    ours = resolved(parse(*DDTREE, *drafter, *breakable)).cuda_graph_config.prefill.bs
    assert SMALL_PREFILL_GRAPH_TOKENS == (1, 2) and list(ours) == [1, 2] + list(upstream)
    assert ddtree_logs.text.count("prefill CUDA graphs also at [1, 2] token(s), below upstream's 4..") == 1
    given = resolved(parse(*DDTREE, *drafter, *breakable, "--cuda-graph-bs-prefill", "8", "16"))
    assert list(given.cuda_graph_config.prefill.bs) == [8, 16]
    other = resolved(parse(*DDTREE, *drafter, "--cuda-graph-backend-prefill", "disabled")).cuda_graph_config
    assert other.prefill.backend == "disabled" and (not other.prefill.bs or min(other.prefill.bs) >= 4)
    # the ones a GPU ran them on: triton (session 46), fa3 (sessions 48-49: sharp parity exact, every fa3 speed cell)
    assert SMALL_PREFILL_GRAPH_BACKENDS == ("triton", "fa3")
    fa3 = resolved(parse(*DDTREE, *drafter, *breakable, "--attention-backend", "fa3")).cuda_graph_config.prefill
    assert list(fa3.bs) == [1, 2] + list(upstream)
    flashinfer = resolved(parse(*DDTREE, *drafter, *breakable, "--attention-backend", "flashinfer"))
    assert list(flashinfer.cuda_graph_config.prefill.bs) == list(upstream)
    from transformers import AutoConfig

    from sglang_ddtree import validation
    from sglang_ddtree.compat import adapter

    if adapter().family == "0.5.16":  # hybrid targets are refused on later families
        monkeypatch.setattr(validation, "_target_hf_config", lambda sa: AutoConfig.from_pretrained(hybrid_target))
        monkeypatch.setattr(validation, "check_hybrid_server_args", lambda sa, cfg: None)
        hybrid = resolved(engine_args(speculative_algorithm="DDTREE", cuda_graph_backend_prefill="breakable",
                                      speculative_draft_model_path=tiny_configs["drafter"], attention_backend="triton"))
        assert hybrid.speculative_ddtree_budget == 15 and list(hybrid.cuda_graph_config.prefill.bs) == list(upstream)
    assert ddtree_logs.text.count("prefill CUDA graphs also at") == 2  # triton's and fa3's above, no other


def test_flags_without_ddtree_warn_and_change_nothing(parse, tiny_configs, ddtree_logs):
    sa = parse("--speculative-ddtree-budget", "32")
    assert resolved(sa).speculative_algorithm is None and resolved(sa).speculative_num_draft_tokens is None
    assert "--speculative-ddtree-budget=32 has no effect without --speculative-algorithm DDTREE" in ddtree_logs.text


# From 0.5.22 attention DP is --attn-dp-size N; the deprecated --dp-size N --enable-dp-attention resolves to it.
_DP_REFUSAL = (r"does not support --attn-dp-size 2 yet\.$" if _installed_at_least("0.5.22")
               else r"does not support --enable-dp-attention yet\.$")

# (extra CLI args, regex the ValueError must match). Each names the flag, the value and what is allowed.
BAD_CLI = [
    pytest.param(["--speculative-ddtree-budget", "0"], r"--speculative-ddtree-budget must be in \[1, 1024\], got 0\.", id="budget-0"),
    pytest.param(["--speculative-ddtree-budget", "1025"], r"--speculative-ddtree-budget must be in \[1, 1024\], got 1025\.", id="budget-1025"),
    pytest.param(["--speculative-ddtree-topk", "0"], r"--speculative-ddtree-topk must be in \[1, 64\], got 0\.", id="topk-0"),
    pytest.param(["--speculative-ddtree-topk", "65"], r"--speculative-ddtree-topk must be in \[1, 64\], got 65\.", id="topk-65"),
    pytest.param(["--attention-backend", "trtllm_mha"], r"cannot use --attention-backend trtllm_mha: it has no custom \(tree\) attention mask\. Use --attention-backend triton, flashinfer or fa3\.", id="trtllm_mha"),
    pytest.param(["--prefill-attention-backend", "trtllm_mha"], r"cannot use --prefill-attention-backend trtllm_mha", id="trtllm_mha-prefill"),
    pytest.param(["--attention-backend", "torch_native"], r"cannot use the prefill attention backend 'torch_native' \(from --attention-backend\): its tree-mask verify path is untested with DDTREE\. Use --attention-backend triton, flashinfer or fa3\.", id="untested-backend"),
    pytest.param(["--attention-backend", "triton", "--decode-attention-backend", "torch_native"], r"decode attention backend 'torch_native' \(from --decode-attention-backend\)", id="decode-torch_native"),
    pytest.param(["--attention-backend", "triton", "--decode-attention-backend", "flashinfer", "--page-size", "16"], r"supports --page-size 16 only with a fixed budget and one --attention-backend of fa3 / triton / flashinfer for the target and the drafter for now, but the prefill and decode attention backends differ \('triton', 'flashinfer'\) \(use --page-size 1, or set SGLANG_DDTREE_EXPERIMENTAL_PAGED=1 to try it: not yet verified on a GPU\)\.", id="page-size"),
    pytest.param(["--pp-size", "2"], r"does not support pipeline parallelism yet: --pp-size must be 1, got 2\.", id="pp"),
    pytest.param(["--enable-dp-attention", "--dp-size", "2", "--tp-size", "2"], _DP_REFUSAL, id="dp-attention"),
    pytest.param(["--speculative-num-draft-tokens", "8"], r"--speculative-num-draft-tokens=8 cannot be set with --speculative-algorithm DDTREE: it is derived as --speculative-ddtree-budget \+ 1", id="num-draft-tokens"),
    pytest.param(["--speculative-eagle-topk", "4"], r"--speculative-eagle-topk=4 cannot be set with --speculative-algorithm DDTREE: it is derived from --speculative-ddtree-topk", id="eagle-topk"),
    pytest.param(["--speculative-num-steps", "3"], r"--speculative-num-steps=3 cannot be set with --speculative-algorithm DDTREE", id="num-steps"),
    pytest.param(["--speculative-draft-window-size", "64"], r"--speculative-draft-window-size is not supported with --speculative-algorithm DDTREE yet, got 64\.", id="draft-window"),
]


@pytest.mark.parametrize("capability", [(10, 0), (12, 0)], ids=["sm100", "sm120"])
@pytest.mark.parametrize("extra, what, flag", [
    (["--attention-backend", "fa3"], "prefill", "--attention-backend"),
    (["--attention-backend", "triton", "--decode-attention-backend", "fa3"], "decode", "--attention-backend"),
    (["--attention-backend", "triton", "--speculative-draft-attention-backend", "fa3"], "draft",
     "--speculative-draft-attention-backend"),
], ids=["target", "decode", "draft"])
def test_fa3_is_refused_on_blackwell(parse, tiny_configs, capsys, monkeypatch, capability, extra, what, flag):
    """fa3 would pass validation and then fail upstream's SM 8.x / 9.x assertion after the weights load."""
    from sglang_ddtree import validation

    monkeypatch.setattr(validation, "_cuda_capability", lambda: capability)
    sm = f"sm_{capability[0]}{capability[1]}"
    _one_line_cli_error(capsys, lambda: parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter"],
                                              *extra),
                        rf"cannot use the {what} attention backend 'fa3' on this GPU: FlashAttention 3 \(sgl_kernel's "
                        rf"flash_ops\) runs on Hopper sm_90 / Ampere sm_80 only, and this GPU is {sm}\. "
                        rf"Use {flag} triton or flashinfer\.")


@pytest.mark.parametrize("capability, backend", [((12, 0), "triton"), ((12, 0), "flashinfer"), ((10, 0), "triton"),
                                                 ((9, 0), "fa3"), (None, "fa3")])
def test_backends_that_run_on_the_gpu_are_accepted(parse, tiny_configs, monkeypatch, capability, backend):
    from sglang_ddtree import validation

    monkeypatch.setattr(validation, "_cuda_capability", lambda: capability)
    sa = parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter"], "--attention-backend", backend)
    assert sa.attention_backend == backend


@pytest.mark.parametrize("capability, installed, fused, want", [
    ((9, 0), True, True, "fa3"), ((9, 0), False, True, "triton"), ((9, 0), True, False, "triton"),
    ((8, 0), True, True, "triton"), ((10, 0), True, True, "triton"), ((12, 0), False, False, "triton"),
    (None, True, True, "triton")])
def test_default_backend_is_the_fastest_tested_one_on_the_gpu(capability, installed, fused, want):
    """fa3 on Hopper with the FA3 library and the fused tree attention (measured fastest on the H200); triton
    everywhere else (and without a visible GPU)."""
    from sglang_ddtree.backends import arch_refusal, default_target_backend

    backend, why = default_target_backend(capability, fa3_installed=installed, fa3_fused=fused)
    assert backend == want and why and arch_refusal(backend, capability) is None


def test_no_backend_named_on_a_hopper_gpu_picks_fa3_and_says_so(parse, tiny_configs, monkeypatch, ddtree_logs):
    from sglang_ddtree import backends, validation

    monkeypatch.setattr(validation, "_cuda_capability", lambda: (9, 0))
    monkeypatch.setattr(backends, "fa3_library_installed", lambda: True)
    monkeypatch.setattr("sglang_ddtree.server_args.fa3_library_installed", lambda: True)
    monkeypatch.delenv("SGLANG_DDTREE_FA3_TREE_ATTENTION", raising=False)
    from sglang_ddtree.worker import fa3_tree

    sa = parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter"])
    want = "fa3" if fa3_tree.enabled() else "triton"  # the fused path is on where the release carries it
    assert sa.attention_backend == want
    assert f"no --attention-backend given; using '{want}'" in ddtree_logs.text
    monkeypatch.setenv("SGLANG_DDTREE_FA3_TREE_ATTENTION", "0")
    assert parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter"]).attention_backend == "triton"


def test_default_backend_runs_on_every_architecture_we_compile_for():
    from sglang_ddtree.backends import DEFAULT_TARGET_ATTENTION_BACKEND, arch_refusal, backends_for_capability

    for capability in ((9, 0), (10, 0), (10, 3), (12, 0)):
        assert arch_refusal(DEFAULT_TARGET_ATTENTION_BACKEND, capability) is None, capability
    assert backends_for_capability((12, 0)) == ("triton", "flashinfer")
    assert backends_for_capability((9, 0)) == ("triton", "flashinfer", "fa3")


def _one_line_cli_error(capsys, parse_call, message):
    """The command line prints a DDTREE configuration error as ONE line (after any log lines, no
    traceback) and exits with status 2."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        parse_call()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("sglang: error: ")]
    assert len(errors) == 1 and err.rstrip().endswith(errors[0]) and "Traceback" not in err, err
    assert re.search(message, errors[0]), (message, errors[0])


@pytest.mark.parametrize("extra, message", BAD_CLI)
def test_bad_cli_input_fails_fast_with_a_clear_message(parse, tiny_configs, capsys, extra, message):
    _one_line_cli_error(capsys, lambda: parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter"],
                                              *extra), message)


@pytest.mark.skipif(not _installed_at_least("0.5.22"), reason="--attn-dp-size is a flag from SGLang 0.5.22")
def test_attention_dp_by_width_is_refused(parse, tiny_configs, capsys):
    _one_line_cli_error(capsys, lambda: parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter"],
                                              "--attn-dp-size", "2", "--tp-size", "2"),
                        r"--speculative-algorithm DDTREE does not support --attn-dp-size 2 yet\.$")


@pytest.mark.parametrize("extra, message", BAD_CLI[:3] + BAD_CLI[6:7])
def test_engine_kwargs_get_the_same_error_as_a_value_error(engine_args, tiny_configs, extra, message):
    """``sglang.Engine`` callers get a ValueError (no exit): same messages as the command line."""
    flag, value = extra[0].lstrip("-").replace("-", "_"), extra[1]
    with pytest.raises(ValueError, match=message):
        engine_args(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"],
                    **{flag: int(value) if value.isdigit() else value})


def test_upstream_errors_are_not_swallowed(parse, tiny_configs):
    """Only DDTREE's own configuration errors become one-liners; upstream's propagate unchanged."""
    from sglang_ddtree.config import DDTreeArgumentError

    with pytest.raises(ValueError) as err:
        parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter"],
              "--speculative-dflash-block-size", "0")
    assert not isinstance(err.value, DDTreeArgumentError)


def test_missing_draft_model_path(parse, capsys):
    _one_line_cli_error(capsys, lambda: parse(*DDTREE),
                        r"--speculative-algorithm DDTREE requires --speculative-draft-model-path")


@pytest.mark.parametrize("drafter, message", [
    ("/nonexistent/drafter", r"--speculative-draft-model-path /nonexistent/drafter: no such directory"),
    ("target", r"is not a DFlash drafter: its config.json has architectures \['Qwen3ForCausalLM'\]"),
    ("empty", r": no config.json there"),
])
def test_draft_path_must_be_a_local_dflash_drafter(parse, tiny_configs, tmp_path, capsys, drafter, message):
    path = {"target": tiny_configs["target"], "empty": str(tmp_path)}.get(drafter, drafter)
    _one_line_cli_error(capsys, lambda: parse(*DDTREE, "--speculative-draft-model-path", path), message)


def test_cpu_device_is_refused(sglang_with_plugin, tiny_configs, capsys):
    from sglang.srt.server_args import prepare_server_args

    _one_line_cli_error(
        capsys,
        lambda: prepare_server_args(["--model-path", tiny_configs["target"], "--device", "cpu", "--skip-tokenizer-init",
                                     *DDTREE, "--speculative-draft-model-path", tiny_configs["drafter"]]),
        r"runs on CUDA GPUs only, got --device cpu")


def test_hybrid_target_passes_on_0_5_16_and_is_refused_elsewhere(hybrid_target, tiny_configs, monkeypatch):
    # Upstream's own Mamba checks need a GPU before speculative validation runs, so validate the
    # loaded configs directly here; on a GPU the same check runs inside ServerArgs.__post_init__.
    import types

    from transformers import AutoConfig

    from sglang_ddtree.compat import adapter
    from sglang_ddtree.validation import _check_unsupported_features, is_hybrid_linear_attention

    hybrid, dense = AutoConfig.from_pretrained(hybrid_target), AutoConfig.from_pretrained(tiny_configs["target"])
    assert is_hybrid_linear_attention(hybrid) and not is_hybrid_linear_attention(dense)
    args = types.SimpleNamespace(speculative_draft_window_size=None, speculative_adaptive=False,
                                 disaggregation_mode="null")
    # The target's model config as the installed release's adapter reads it (0.5.16: get_model_config(),
    # 0.5.19: ModelConfig.from_server_args), stood in.
    monkeypatch.setattr(adapter(), "target_model_config", lambda server_args: types.SimpleNamespace(hf_config=hybrid))
    monkeypatch.delenv("SGLANG_DDTREE_EXPERIMENTAL_HYBRID", raising=False)
    monkeypatch.setattr(adapter(), "family", "0.5.16")
    _check_unsupported_features(args)  # the rest of the hybrid rules: hybrid_args.check_server_args
    monkeypatch.setattr(adapter(), "family", "0.5.18")
    with pytest.raises(ValueError, match=r"supports hybrid linear-attention \(Mamba/GDN\) targets on SGLang 0\.5\.16 "
                                         r"only for now .* the installed family is 0\.5\.18 and the target "
                                         r"architecture Qwen3NextForCausalLM\."):
        _check_unsupported_features(args)


def test_non_integer_values_from_python_are_refused(engine_args, tiny_configs):
    for value in ("64", 64.0, True):
        with pytest.raises(ValueError, match=r"--speculative-ddtree-budget must be an integer in \[1, 1024\] or 'auto', got "):
            engine_args(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"],
                        speculative_ddtree_budget=value)


def test_non_integer_cli_value_is_an_argparse_error(parse, capsys):
    with pytest.raises(SystemExit):
        parse(*DDTREE, "--speculative-ddtree-budget", "many")
    assert "--speculative-ddtree-budget: invalid value 'many': an integer or 'auto'" in capsys.readouterr().err


def test_budget_auto_refuses_releases_whose_backends_read_get_spec(engine_args, tiny_configs, monkeypatch):
    import types

    import sglang_ddtree.compat as compat

    installed = compat.adapter()  # its resolution, another family's name
    monkeypatch.setattr(compat, "adapter",
                        lambda: types.SimpleNamespace(family="0.5.17", budget_auto=False,
                                                      resolve_fields=installed.resolve_fields,
                                                      attention_dp_flag=installed.attention_dp_flag))
    with pytest.raises(ValueError, match=r"--speculative-ddtree-budget auto needs SGLang 0.5.16 for now .* "
                                         r"installed family 0.5.17; use a fixed budget"):
        engine_args(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"],
                    speculative_ddtree_budget="auto")


def test_flashinfer_plan_switch_needs_the_flashinfer_it_was_written_against(engine_args, tiny_configs, monkeypatch):
    from sglang_ddtree.worker import flashinfer_plan

    monkeypatch.setenv(flashinfer_plan.ENV, "1")
    monkeypatch.setattr(flashinfer_plan, "installed_flashinfer", lambda: "0.6.18")
    with pytest.raises(ValueError, match=rf"{flashinfer_plan.ENV}=1 needs flashinfer-python 0\.6\.14 \(installed: "
                                         r"0\.6\.18\); unset it \(flashinfer then plans with upstream's plan\(\)\)\."):
        engine_args(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"])
    monkeypatch.setattr(flashinfer_plan, "installed_flashinfer", lambda: None)
    with pytest.raises(ValueError, match=r"\(installed: none\)"):
        engine_args(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"])
    monkeypatch.setattr(flashinfer_plan, "installed_flashinfer", lambda: "0.6.14")
    engine_args(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"])
    monkeypatch.setenv(flashinfer_plan.ENV, "0")
    monkeypatch.setattr(flashinfer_plan, "installed_flashinfer", lambda: "0.6.18")
    engine_args(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"])
    monkeypatch.delenv(flashinfer_plan.ENV)  # unset: the default, off with that FlashInfer, is no error
    engine_args(speculative_algorithm="DDTREE", speculative_draft_model_path=tiny_configs["drafter"])


@pytest.mark.parametrize("env, installed, says", [
    (None, "0.6.14", "planned without host syncs (DDTREE's plan, flashinfer-python 0.6.14; "
                     "SGLANG_DDTREE_FLASHINFER_PLAN=0 for upstream's plan())"),
    ("0", "0.6.14", "planned by upstream's plan() (SGLANG_DDTREE_FLASHINFER_PLAN=0)"),
    (None, "0.6.18", "planned by upstream's plan() (flashinfer-python 0.6.18: the sync-free plan is written "
                     "against 0.6.14)"),
])
def test_a_flashinfer_server_logs_which_plan_its_replays_use(parse, tiny_configs, ddtree_logs, monkeypatch, env,
                                                             installed, says):
    from sglang_ddtree.worker import flashinfer_plan

    monkeypatch.delenv(flashinfer_plan.ENV, raising=False)
    if env is not None:
        monkeypatch.setenv(flashinfer_plan.ENV, env)
    monkeypatch.setattr(flashinfer_plan, "installed_flashinfer", lambda: installed)
    parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter8"], "--attention-backend", "flashinfer")
    lines = [r.getMessage() for r in ddtree_logs.records if "DDTREE on flashinfer" in r.getMessage()]
    assert lines == [f"DDTREE on flashinfer: graph replays {says}."]
    ddtree_logs.records.clear()
    parse(*DDTREE, "--speculative-draft-model-path", tiny_configs["drafter8"], "--attention-backend", "triton")
    assert "DDTREE on flashinfer" not in ddtree_logs.text
