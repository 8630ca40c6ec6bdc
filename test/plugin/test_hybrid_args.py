"""Argument-time rules for DDTREE on hybrid GDN targets (``sglang_ddtree.hybrid_args``) and the COMMIT row
choices of ``worker/hybrid.py`` that need no kernel: the experimental switch, the flag combinations refused with
one-line errors, the per-node state memory (held against upstream's own ``mamba_cache_per_req``) and the
start-up refusal of a budget that cannot fit, with its numbers."""

import re
import types

import pytest
import torch

from sglang_ddtree import hybrid_args
from sglang_ddtree.config import DDTreeArgumentError

GIB = 1 << 30


def _qwen3_next(**kw):
    from sglang.srt.configs.qwen3_next import Qwen3NextConfig

    base = dict(vocab_size=512, hidden_size=256, num_hidden_layers=8, num_attention_heads=2, num_key_value_heads=1,
                head_dim=128, full_attention_interval=4)
    cfg = Qwen3NextConfig(**{**base, **kw})
    cfg.architectures = ["Qwen3NextForCausalLM"]
    return cfg


# ---- the switch ----------------------------------------------------------------------------------------------

def test_hybrid_targets_run_on_the_verified_release_only(monkeypatch):
    """SGLang 0.5.16 takes hybrid targets with or without the switch; another release family refuses them with one
    line naming the family and the architecture, switch or not; a switch value other than 0 / 1 is an error."""
    import types

    import sglang_ddtree.compat as compat

    for value in (None, "0", "1"):
        if value is None:
            monkeypatch.delenv(hybrid_args.ENV, raising=False)
        else:
            monkeypatch.setenv(hybrid_args.ENV, value)
        monkeypatch.setattr(compat, "adapter", lambda: types.SimpleNamespace(family="0.5.16"))
        hybrid_args.check_release("X")
        monkeypatch.setattr(compat, "adapter", lambda: types.SimpleNamespace(family="0.5.18"))
        with pytest.raises(ValueError, match=r"^--speculative-algorithm DDTREE supports hybrid linear-attention "
                                             r"\(Mamba/GDN\) targets on SGLang 0\.5\.16 only for now .*the installed "
                                             r"family is 0\.5\.18 and the target architecture X\. Use SGLang 0\.5\.16, "
                                             r"or DFLASH for this model\.$"):
            hybrid_args.check_release("X")
    monkeypatch.setenv(hybrid_args.ENV, "yes")
    with pytest.raises(ValueError, match=r"SGLANG_DDTREE_EXPERIMENTAL_HYBRID='yes': use 1"):
        hybrid_args.check_release("X")


# ---- memory --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tp", [1, 2])
def test_state_bytes_per_node_equal_upstreams_mamba_cache_per_req(monkeypatch, tp):
    import sglang.srt.configs.qwen3_next as qn

    cfg = _qwen3_next(linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64,
                      linear_value_head_dim=32, linear_conv_kernel_dim=4)
    monkeypatch.setattr(qn, "get_parallel", lambda: types.SimpleNamespace(attn_tp_size=tp))
    if hasattr(qn, "linear_attn_tp_size"):  # from 0.5.23 the state shape's TP width comes from here
        monkeypatch.setattr(qn, "linear_attn_tp_size", lambda: tp)
    assert hybrid_args.gdn_state_bytes_per_node(cfg, tp) == cfg.mamba2_cache_params.mamba_cache_per_req
    assert len(hybrid_args.gdn_layer_ids(cfg)) == 6  # 8 layers, every 4th full attention


def test_a_budget_that_fits_passes_and_one_that_does_not_is_refused_with_its_numbers():
    per_node = 64 << 20  # 64 MiB per tree row, about a Qwen3-Next-80B rank at tp 1
    cap = 141 * GIB
    hybrid_args.check_intermediate_state_fits(per_node, 15, 48, cap, 0.9)  # 16 rows x 48 x 64 MiB = 48 GiB
    with pytest.raises(DDTreeArgumentError) as e:
        hybrid_args.check_intermediate_state_fits(per_node, 64, 48, cap, 0.9)  # 65 x 48 x 64 MiB = 195 GiB
    msg = str(e.value)
    assert "\n" not in msg
    assert ("64.00 MiB per row x 65 rows (--speculative-ddtree-budget 64 + 1) = 4.06 GiB per request, x 48 "
            "requests (--max-running-requests) = 195.0 GiB, more than 0.9 (--mem-fraction-static) of this GPU's "
            "141.0 GiB; --speculative-ddtree-budget <= 41 fits 48 requests, or --max-running-requests <= 31 fits "
            "budget 64.") in msg
    # the suggested limits are exact: they fit, one more does not
    hybrid_args.check_intermediate_state_fits(per_node, 41, 48, cap, 0.9)
    hybrid_args.check_intermediate_state_fits(per_node, 64, 31, cap, 0.9)
    for budget, reqs in ((42, 48), (64, 32)):
        with pytest.raises(DDTreeArgumentError):
            hybrid_args.check_intermediate_state_fits(per_node, budget, reqs, cap, 0.9)
    with pytest.raises(DDTreeArgumentError, match=r"no budget fits 48 requests; budget 64 does not fit even one"):
        hybrid_args.check_intermediate_state_fits(4 * GIB, 64, 48, cap, 0.9)
    hybrid_args.check_intermediate_state_fits(per_node, 1024, 1024, None, 0.9)  # capacity unknown: no refusal
    assert hybrid_args.largest_fitting_budget(per_node, 48, cap, 0.9) == 41  # what budget auto may use at most


def test_budget_auto_is_checked_at_its_largest_bucket_and_says_so():
    per_node, cap = 64 << 20, 141 * GIB
    hybrid_args.check_intermediate_state_fits(per_node, 63, 31, cap, 0.9, auto=True)  # 64 x 31 x 64 MiB = 124 GiB
    with pytest.raises(DDTreeArgumentError) as e:
        hybrid_args.check_intermediate_state_fits(per_node, 63, 48, cap, 0.9, auto=True)
    msg = str(e.value)
    assert "\n" not in msg
    assert ("64.00 MiB per row x 64 rows (--speculative-ddtree-budget auto's largest bucket 63 + 1) = 4.00 GiB per "
            "request, x 48 requests (--max-running-requests) = 192.0 GiB, more than 0.9 (--mem-fraction-static) of "
            "this GPU's 141.0 GiB; a fixed --speculative-ddtree-budget <= 41 fits 48 requests, or "
            "--max-running-requests <= 31 fits budget auto.") in msg
    hybrid_args.check_intermediate_state_fits(per_node, 63, 31, cap, 0.9, auto=True)  # the suggestion fits
    with pytest.raises(DDTreeArgumentError, match=r"budget auto does not fit even one request"):
        hybrid_args.check_intermediate_state_fits(4 * GIB, 63, 48, cap, 0.9, auto=True)


def test_budget_auto_buckets_stop_where_the_states_fit_in_half_the_static_fraction(monkeypatch):
    """``auto_largest_fitting_bucket``: the largest 2^k - 1 bucket whose per-row states for the running requests take
    at most AUTO_STATE_SHARE (0.5) of --mem-fraction-static of the GPU, with the numbers for the log; the Qwen3.5-9B
    shape at 48 requests on an H200 gets 15 (README's memory table: 786 MiB a request at 16 rows)."""
    from sglang_ddtree.config import bucket_budgets

    monkeypatch.setattr(hybrid_args, "_gpu_capacity_bytes", lambda sa: 140.4 * GIB)
    qwen35_9b = _qwen3_next(num_hidden_layers=32, linear_num_key_heads=16,
                            linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128,
                            linear_conv_kernel_dim=4)
    per_node = hybrid_args.gdn_state_bytes_per_node(qwen35_9b, 1)
    assert abs(per_node / (1 << 20) - 49.1) < 0.1  # README: 49.1 MiB per row (24 GDN layers)
    largest, numbers = hybrid_args.auto_largest_fitting_bucket(_server_args(qwen35_9b, max_running_requests=48))
    assert largest == 15
    assert numbers == ("49.12 MiB per row x 48 requests (--max-running-requests): 36.8 GiB at 16 rows, at most 0.5 "
                       "of 0.9 (--mem-fraction-static) of this GPU's 140.4 GiB")
    for reqs in (1, 8, 16, 24, 48, 96, 200, 2000):  # exactly the largest bucket within half the fraction
        got, _ = hybrid_args.auto_largest_fitting_bucket(_server_args(qwen35_9b, max_running_requests=reqs))
        room = 140.4 * GIB * 0.9 * 0.5
        fitting = [b for b in bucket_budgets(63) if b >= 1 and (b + 1) * per_node * reqs <= room]
        assert got == max(fitting, default=0), reqs
    assert hybrid_args.auto_largest_fitting_bucket(_server_args(qwen35_9b, max_running_requests=16))[0] == 63
    monkeypatch.setattr(hybrid_args, "_gpu_capacity_bytes", lambda sa: None)
    assert hybrid_args.auto_largest_fitting_bucket(_server_args(qwen35_9b)) is None  # no GPU to tell


# ---- flag combinations ---------------------------------------------------------------------------------------

def _server_args(cfg, **kw):
    model_config = types.SimpleNamespace(hf_config=cfg)
    base = dict(get_model_config=lambda: model_config, enable_gdn_replayssm_spec=False, enable_linear_replayssm=False,
                uses_mamba_radix_cache=True, disable_radix_cache=False, mamba_radix_cache_strategy="extra_buffer",
                mamba_track_interval=256, disable_overlap_schedule=False, tp_size=1, max_running_requests=8,
                mem_fraction_static=0.9, device="cuda", page_size=1, attention_backend="triton",
                prefill_attention_backend=None, decode_attention_backend=None, speculative_draft_attention_backend=None)
    base.update(kw)
    return types.SimpleNamespace(**base)


def _config(budget, adaptive=False):
    return types.SimpleNamespace(budget=budget, num_verify_tokens=budget + 1, adaptive=adaptive)


@pytest.mark.parametrize("kw,match", [
    (dict(mamba_radix_cache_strategy="extra_buffer_lazy"), r"extra_buffer_lazy does not support speculative"),
    (dict(mamba_track_interval=32), r"--mamba-track-interval 32 must be >= the DDTREE verify width 65 "
                                    r"\(--speculative-ddtree-budget 64 \+ 1\)"),
    (dict(mamba_radix_cache_strategy="no_buffer"), r"no_buffer needs --disable-overlap-schedule"),
    (dict(enable_gdn_replayssm_spec=True), r"--enable-gdn-replayssm-spec cannot be used with"),
    (dict(enable_linear_replayssm=True), r"--enable-linear-replayssm cannot be used with"),
])
def test_unsupported_combinations_are_refused_in_one_line(monkeypatch, kw, match):
    monkeypatch.setattr(hybrid_args, "_gpu_capacity_bytes", lambda sa: 141.0 * GIB)
    monkeypatch.delenv("SGLANG_DDTREE_EXPERIMENTAL_PAGED", raising=False)
    with pytest.raises(DDTreeArgumentError, match=match) as e:
        hybrid_args.check_server_args(_server_args(_qwen3_next(), **kw), _config(64))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kw,why", [
    (dict(attention_backend="fa3"), "the prefill attention backend is 'fa3'"),
    (dict(decode_attention_backend="flashinfer"), "the decode attention backend is 'flashinfer'"),
    (dict(speculative_draft_attention_backend="fa3"), "--speculative-draft-attention-backend is 'fa3'"),
    (dict(tp_size=2), "--tp-size is 2"),
])
def test_outside_the_verified_configuration_only_with_the_switch(monkeypatch, caplog, kw, why):
    """Hybrid targets run by default where the GPU verified them (the target and drafter on triton, tp 1); elsewhere
    a one-line refusal names what is outside and the switch, and with the switch the start-up log says
    EXPERIMENTAL and why."""
    import logging

    monkeypatch.setattr(hybrid_args, "_gpu_capacity_bytes", lambda sa: 141.0 * GIB)
    monkeypatch.delenv(hybrid_args.ENV, raising=False)
    with caplog.at_level(logging.INFO, logger=hybrid_args.__name__):
        hybrid_args.check_server_args(_server_args(_qwen3_next()), _config(15))
    assert "the GPU-verified configuration" in caplog.text and "EXPERIMENTAL" not in caplog.text
    with pytest.raises(DDTreeArgumentError) as e:
        hybrid_args.check_server_args(_server_args(_qwen3_next(), **kw), _config(15))
    assert str(e.value) == (
        f"--speculative-algorithm DDTREE on hybrid targets is GPU-verified with --attention-backend triton (the "
        f"drafter's unset or the same) and --tp-size 1 only for now, but {why} (use --attention-backend triton, or "
        f"set SGLANG_DDTREE_EXPERIMENTAL_HYBRID=1 to try it: not yet verified on a GPU).")
    monkeypatch.setenv(hybrid_args.ENV, "1")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=hybrid_args.__name__):
        hybrid_args.check_server_args(_server_args(_qwen3_next(), **kw), _config(15))
    assert f"EXPERIMENTAL (SGLANG_DDTREE_EXPERIMENTAL_HYBRID=1: {why})" in caplog.text


@pytest.mark.parametrize("kw", [
    dict(),  # extra_buffer, interval 256 >= 65
    dict(mamba_radix_cache_strategy="no_buffer", disable_overlap_schedule=True),
    dict(disable_radix_cache=True, mamba_radix_cache_strategy="no_buffer"),
    dict(mamba_track_interval=65),
])
def test_supported_combinations_pass(monkeypatch, kw):
    monkeypatch.setattr(hybrid_args, "_gpu_capacity_bytes", lambda sa: 141.0 * GIB)
    hybrid_args.check_server_args(_server_args(_qwen3_next(), **kw), _config(64))


def test_budget_auto_passes_where_its_largest_bucket_fits_and_names_it_where_not(monkeypatch):
    monkeypatch.setattr(hybrid_args, "_gpu_capacity_bytes", lambda sa: 141.0 * GIB)
    hybrid_args.check_server_args(_server_args(_qwen3_next()), _config(63, adaptive=True))
    with pytest.raises(DDTreeArgumentError, match=r"--mamba-track-interval 32 must be >= the DDTREE verify width 64 "
                                                   r"\(--speculative-ddtree-budget auto's largest bucket 63 \+ 1\)"):
        hybrid_args.check_server_args(_server_args(_qwen3_next(), mamba_track_interval=32), _config(63, adaptive=True))
    monkeypatch.setattr(hybrid_args, "_gpu_capacity_bytes", lambda sa: 1.0 * GIB)
    big = _qwen3_next(linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                      linear_value_head_dim=128)
    with pytest.raises(DDTreeArgumentError, match=r"x 64 rows \(--speculative-ddtree-budget auto's largest bucket "
                                                   r"63 \+ 1\) .* x 8 requests .* fits budget auto"):
        hybrid_args.check_server_args(_server_args(big), _config(63, adaptive=True))


def test_non_gdn_hybrids_are_refused(monkeypatch):
    monkeypatch.setattr(hybrid_args, "_gpu_capacity_bytes", lambda sa: 141.0 * GIB)
    from transformers import PretrainedConfig

    other = PretrainedConfig(architectures=["NemotronHForCausalLM"])
    with pytest.raises(DDTreeArgumentError, match=r"supports Gated DeltaNet targets only .* NemotronHForCausalLM"):
        hybrid_args.check_server_args(_server_args(other), _config(15))


def test_the_memory_check_runs_on_the_validated_config(monkeypatch):
    monkeypatch.setattr(hybrid_args, "_gpu_capacity_bytes", lambda sa: 1.0 * GIB)
    big = _qwen3_next(linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
                      linear_value_head_dim=128)
    with pytest.raises(DDTreeArgumentError, match=r"x 65 rows .* x 8 requests"):
        hybrid_args.check_server_args(_server_args(big), _config(64))


# ---- COMMIT rows without kernels -----------------------------------------------------------------------------

def test_last_accepted_rows_and_track_rows_by_hand():
    from sglang_ddtree.worker.hybrid import last_accepted_rows, track_rows

    n = 10
    # accepted rows by depth (W = 4): request 0 root -> 2 -> 5 -> 9; request 1 root only; request 2 root -> 1 -> 4
    rows = torch.tensor([[0, 2, 5, 9], [0, 0, 0, 0], [0, 1, 4, 4]])
    ctx = (rows + torch.arange(3).view(3, 1) * n).reshape(-1)
    acc = torch.tensor([4, 1, 3], dtype=torch.int32)
    assert last_accepted_rows(ctx, acc, n).tolist() == [9, 0, 4]
    # interval 16: request 0 goes 14 -> 18 (crosses 16: state after position 15 = depth 1 = row 2); request 1
    # 31 -> 32 (crosses 32: depth 0, the root); request 2 20 -> 23 (no crossing)
    prefix = torch.tensor([14, 31, 20])
    assert track_rows(ctx, acc, prefix, n, 16).tolist() == [2, 0, -1]


def test_the_commit_goes_through_the_backend_that_verified():
    """Budget auto verifies each width on its own backend (widths.VerifyWidths); the verify's forward metadata
    (the requests' mamba slots) lives there, so the COMMIT must call that backend, not the runner's own."""
    from sglang_ddtree.worker.hybrid import HybridStateCommit

    class Backend:
        def __init__(self):
            self.calls = []

        def update_mamba_state_after_mtp_verify(self, **kw):
            self.calls.append(kw)

    own, width_7 = Backend(), Backend()
    runner = types.SimpleNamespace(attn_backend=own, model="model")
    commit = types.SimpleNamespace(ctx_rows=torch.tensor([0, 3, 8, 11]), accept_lens=torch.tensor([2, 1]))
    batch = types.SimpleNamespace(mamba_track_indices=None)
    hc = HybridStateCommit(runner, track_interval=None)
    hc(batch, commit, 8, torch.tensor([5, 9]), width_7)
    assert own.calls == [] and len(width_7.calls) == 1
    assert width_7.calls[0]["last_correct_step_indices"].tolist() == [3, 0]  # rows 3 and 8 - 8 = 0
    hc(batch, commit, 8, torch.tensor([5, 9]))  # no backend named (a fixed budget): the runner's own
    assert len(own.calls) == 1


def test_doctor_says_what_hybrid_serving_needs(monkeypatch):
    import types

    import sglang_ddtree.compat as compat
    from sglang_ddtree import doctor

    monkeypatch.setattr(compat, "adapter", lambda: types.SimpleNamespace(family="0.5.16"))
    monkeypatch.delenv(hybrid_args.ENV, raising=False)
    note = doctor._hybrid_note()
    assert ("tree verify on, --attention-backend triton and tp 1 (GPU-verified; SGLANG_DDTREE_EXPERIMENTAL_HYBRID=1 "
            "to try others); --page-size > 1 there with a fixed budget (GPU-verified at 16 / 64; with budget auto or "
            "beyond triton / tp 1 only with SGLANG_DDTREE_EXPERIMENTAL_PAGED=1, not yet verified on a GPU)") in note
    assert "--mamba-scheduler-strategy extra_buffer (--mamba-track-interval >= budget + 1)" in note
    assert "--disable-overlap-schedule; default budget 15 there; each tree row keeps a conv + SSM state" in note
    assert ("budget + 1 rows per request, budget auto: its largest bucket's, 64 or, where those states would take "
            "more than 0.5 of --mem-fraction-static, the largest bucket within it)") in note
    monkeypatch.setenv(hybrid_args.ENV, "1")
    assert "EXPERIMENTAL beyond --attention-backend triton / tp 1 (SGLANG_DDTREE_EXPERIMENTAL_HYBRID=1)" in \
        doctor._hybrid_note()
    monkeypatch.setattr(compat, "adapter", lambda: types.SimpleNamespace(family="0.5.19"))
    assert "refused on SGLang 0.5.19 (the tree verify's state commit is verified against 0.5.16 only)" in \
        doctor._hybrid_note()
    monkeypatch.setenv(hybrid_args.ENV, "2")
    assert "use 1" in doctor._hybrid_note()


def test_a_local_hybrid_target_gets_the_verified_backend_when_none_is_named(hybrid_target, tiny_configs, tmp_path,
                                                                            monkeypatch):
    """No --attention-backend and a local hybrid checkpoint (Qwen3-Next's flat config, Qwen3.5's nested
    text_config): DDTREE picks triton, the hybrid target's GPU-verified backend, not the GPU's dense default;
    a dense target or a repo id keeps the dense default, and a defaulted backend outside the verified one is
    named as such in the refusal."""
    import json
    import types

    from sglang_ddtree import backends
    from sglang_ddtree import validation
    from sglang_ddtree.server_args import DDTreeServerArgs

    nested = tmp_path / "qwen35"
    nested.mkdir()
    (nested / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "text_config": {"layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
                        "linear_conv_kernel_dim": 4}}))
    assert hybrid_args.local_target_is_hybrid(hybrid_target) and hybrid_args.local_target_is_hybrid(str(nested))
    assert not hybrid_args.local_target_is_hybrid(tiny_configs["target"])
    assert not hybrid_args.local_target_is_hybrid("Qwen/Qwen3.5-9B")  # a repo id: decided later, from its config

    monkeypatch.setattr(validation, "_cuda_capability", lambda: (9, 0))  # a Hopper GPU with the FA3 library
    monkeypatch.setattr("sglang_ddtree.server_args.fa3_library_installed", lambda: True)
    monkeypatch.setattr(backends, "fa3_library_installed", lambda: True)
    monkeypatch.setattr("sglang_ddtree.worker.fa3_tree.enabled", lambda: True)

    def early(model_path):
        args = types.SimpleNamespace(model_path=model_path, speculative_draft_model_path=tiny_configs["drafter"],
                                     attention_backend=None, prefill_attention_backend=None,
                                     decode_attention_backend=None)
        DDTreeServerArgs._ddtree_early_checks(args)
        return args

    assert early(hybrid_target).attention_backend == "triton"
    assert early(str(nested)).attention_backend == "triton"
    assert early(tiny_configs["target"]).attention_backend == "fa3"
    defaulted = _server_args(_qwen3_next(), attention_backend="fa3",
                             _ddtree_requested_attention_backends=(None, None, None))
    assert hybrid_args.unverified_reason(defaulted) == \
        "the prefill attention backend is 'fa3' (picked by default: no --attention-backend given)"
    assert hybrid_args.unverified_reason(_server_args(_qwen3_next(), attention_backend="fa3",
                                                      _ddtree_requested_attention_backends=("fa3", None, None))) \
        == "the prefill attention backend is 'fa3'"


def test_page_sizes_above_1_on_a_hybrid_target_in_the_verified_configuration(monkeypatch, caplog):
    """--page-size 16 / 64 on a hybrid target: taken without any switch where the H200 verified it (session 26,
    paged_hybrid: triton, tp 1, a fixed budget, radix on extra_buffer or off), logged as the verified configuration;
    budget auto, the radix cache on no_buffer, any backend beyond triton and tp > 1 need
    SGLANG_DDTREE_EXPERIMENTAL_PAGED (one line naming the reason), and with it the start-up log says EXPERIMENTAL and
    why; beyond triton both switches."""
    import logging

    monkeypatch.setattr(hybrid_args, "_gpu_capacity_bytes", lambda sa: 141.0 * GIB)
    monkeypatch.delenv("SGLANG_DDTREE_EXPERIMENTAL_PAGED", raising=False)
    monkeypatch.delenv(hybrid_args.ENV, raising=False)
    for page in (16, 64):
        for kw in (dict(), dict(disable_radix_cache=True), dict(disable_overlap_schedule=True)):
            caplog.clear()
            with caplog.at_level(logging.INFO, logger=hybrid_args.__name__):
                hybrid_args.check_server_args(_server_args(_qwen3_next(), page_size=page, **kw), _config(64))
            assert "the GPU-verified configuration" in caplog.text and "EXPERIMENTAL" not in caplog.text
    refused = [
        (dict(page_size=16), _config(63, adaptive=True), "--speculative-ddtree-budget is auto"),
        (dict(page_size=16, mamba_radix_cache_strategy="no_buffer", disable_overlap_schedule=True), _config(15),
         "the radix cache runs on --mamba-scheduler-strategy no_buffer"),
        (dict(page_size=64, attention_backend="fa3"), _config(15), "the prefill attention backend is 'fa3'"),
        (dict(page_size=16, tp_size=2), _config(15), "--tp-size is 2"),
    ]
    for kw, config, reason in refused:
        with pytest.raises(DDTreeArgumentError, match=rf"supports --page-size {kw['page_size']} only with .*, but "
                                                      rf"{re.escape(reason)} \(use --page-size 1, or set "
                                                      rf"SGLANG_DDTREE_EXPERIMENTAL_PAGED=1"):
            hybrid_args.check_server_args(_server_args(_qwen3_next(), **kw), config)
    monkeypatch.setenv("SGLANG_DDTREE_EXPERIMENTAL_PAGED", "1")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=hybrid_args.__name__):
        hybrid_args.check_server_args(_server_args(_qwen3_next(), page_size=16), _config(63, adaptive=True))
    assert ("EXPERIMENTAL (SGLANG_DDTREE_EXPERIMENTAL_PAGED=1: --page-size 16, --speculative-ddtree-budget is auto)"
            in caplog.text)
    with pytest.raises(DDTreeArgumentError, match=r"but the prefill attention backend is 'fa3'"):
        hybrid_args.check_server_args(_server_args(_qwen3_next(), page_size=16, attention_backend="fa3"), _config(15))
    monkeypatch.setenv(hybrid_args.ENV, "1")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=hybrid_args.__name__):
        hybrid_args.check_server_args(_server_args(_qwen3_next(), page_size=16, attention_backend="fa3"), _config(15))
    assert ("EXPERIMENTAL (SGLANG_DDTREE_EXPERIMENTAL_HYBRID=1: the prefill attention backend is 'fa3'; "
            "SGLANG_DDTREE_EXPERIMENTAL_PAGED=1: --page-size 16, the prefill attention backend is 'fa3')") \
        in caplog.text