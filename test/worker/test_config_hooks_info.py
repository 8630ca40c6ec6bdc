"""The one DDTreeConfig (checked against what the tree package builds), the drafter's server-args view, the
upstream hooks and the SpecInput dataclasses."""

import types

import pytest
import torch

from sglang_ddtree.config import DDTreeConfig, is_ddtree, is_validated_ddtree_args
from sglang_ddtree.tree import build_tree
from sglang_ddtree.worker import hooks
from sglang_ddtree.worker.draft_view import draft_server_args_view

CONFIGS = [(64, 8, 16), (15, 8, 16), (1, 1, 8), (3, 2, 16), (512, 8, 16), (64, 1, 16), (7, 1, 16)]


def _chain_draft(bs: int, depth: int, k: int):
    """Draft top-K whose best prefixes are the rank-0 chain first: a tree of budget >= depth is deepest."""
    log_probs = torch.linspace(-0.01, -3.0, k).repeat(bs, depth, 1)
    ids = torch.arange(k).repeat(bs, depth, 1) + 1
    return log_probs.contiguous(), ids.contiguous()


@pytest.mark.parametrize("budget,topk,block", CONFIGS)
def test_max_depth_and_accept_width_are_what_a_built_tree_reaches(budget, topk, block):
    """D is the depth of the deepest node the tree package can build, W = D + 1 the longest accept length."""
    cfg = DDTreeConfig(budget=budget, topk=topk, block_size=block)
    tree = build_tree(*_chain_draft(2, block - 1, topk), budget)
    assert tree.num_rows == cfg.num_verify_tokens
    assert int(tree.depths.max()) == cfg.max_depth
    assert cfg.accept_width == cfg.max_depth + 1


@pytest.mark.parametrize("budget,topk,block", CONFIGS)
def test_reserve_covers_every_write_of_a_round_under_overlap_lag(budget, topk, block):
    """The scheduler sees a committed length S lagging the true one T by up to one round's commit (<= W);
    a round writes the draft block [T, T + L) and the verify [T, T + N). S + reserve must cover both
    for every lag, and one slot less must not (the reserve is tight)."""
    cfg = DDTreeConfig(budget=budget, topk=topk, block_size=block)
    true_len = 1000
    ends = []
    for lag in range(cfg.accept_width + 1):
        seen = true_len - lag
        end = max(true_len + cfg.block_size, true_len + cfg.num_verify_tokens)
        assert seen + cfg.reserve_per_decode >= end, (lag, cfg)
        ends.append(end - seen)
    assert max(ends) == cfg.reserve_per_decode


def test_config_refuses_bad_values():
    with pytest.raises(ValueError, match="--speculative-ddtree-topk"):
        DDTreeConfig(budget=4, topk=8, block_size=16)
    with pytest.raises(ValueError, match="block size >= 2"):
        DDTreeConfig(budget=4, topk=2, block_size=1)
    with pytest.raises(ValueError, match="--speculative-ddtree-budget must be in"):
        DDTreeConfig(budget=0, topk=1, block_size=16)


def _args(**kw):
    base = dict(speculative_algorithm="DDTREE", speculative_ddtree_budget=15, speculative_ddtree_topk=4,
                speculative_dflash_block_size=8, speculative_num_draft_tokens=16, speculative_eagle_topk=4,
                speculative_draft_model_path="/nonexistent")
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_from_server_args_needs_validated_args():
    assert DDTreeConfig.from_server_args(_args()) == DDTreeConfig(15, 4, 8)
    for missing in ("speculative_ddtree_budget", "speculative_dflash_block_size"):
        with pytest.raises(ValueError, match="validated"):
            DDTreeConfig.from_server_args(_args(**{missing: None}))
    with pytest.raises(ValueError, match="validated"):
        DDTreeConfig.from_server_args(_args(speculative_algorithm="DFLASH"))


def test_one_predicate():
    assert is_ddtree("ddtree") and is_ddtree("DDTREE") and not is_ddtree("DFLASH") and not is_ddtree(None)
    assert is_ddtree(types.SimpleNamespace(name="DDTREE")) and not is_ddtree(types.SimpleNamespace(name="EAGLE"))
    assert is_ddtree(_args()) and is_validated_ddtree_args(_args())
    assert not is_validated_ddtree_args(_args(speculative_ddtree_topk=None))


def test_draft_view_sees_block_size_and_topk_one():
    args = _args()
    args.__dict__["max_speculative_num_draft_tokens"] = 16  # a cached_property value
    view = draft_server_args_view(args, DDTreeConfig(15, 4, 8))
    assert view.speculative_num_draft_tokens == 8 and view.speculative_eagle_topk == 1
    assert "max_speculative_num_draft_tokens" not in view.__dict__
    assert args.speculative_num_draft_tokens == 16 and args.speculative_eagle_topk == 4
    assert DDTreeConfig.from_server_args(view) == DDTreeConfig.from_server_args(args)


def _runner(name, is_draft, width=16):
    mr = types.SimpleNamespace(is_draft_worker=is_draft, spec_algorithm=types.SimpleNamespace(name=name),
                               server_args=_args())
    return types.SimpleNamespace(model_runner=mr, captured_req_width=width,
                                 buffers=types.SimpleNamespace(custom_mask=torch.ones(10, dtype=torch.bool)))


def test_capture_hook_gives_the_ddtree_target_a_tree_mask():
    def original(runner, num_tokens):
        return "upstream"

    runner = _runner("DDTREE", False)
    info = hooks.runner_get_spec_info(original, runner, 32)
    assert info.custom_mask is runner.buffers.custom_mask
    assert info.draft_token_num == 16 and info.num_tokens_per_req == 16 and info.topk == 4
    assert info.max_depth == DDTreeConfig.from_server_args(runner.model_runner.server_args).max_depth == 7
    assert hooks.runner_get_spec_info(original, _runner("DDTREE", True), 32) == "upstream"
    assert hooks.runner_get_spec_info(original, _runner("DFLASH", False), 32) == "upstream"


def test_warmup_dummy_hook():
    def original(*args):
        return "upstream"

    mask = torch.ones(4, dtype=torch.bool)
    algo = types.SimpleNamespace(name="DDTREE")
    info = hooks.create_dummy_verify_input(original, algo, _args(), mask, 16, False)
    assert info.custom_mask is mask and info.draft_token_num == 16 and info.max_depth == 7
    assert hooks.create_dummy_verify_input(original, algo, _args(), mask, 8, True) == "upstream"


def test_kv_sizing_hooks():
    args = _args(speculative_ddtree_budget=1, speculative_num_draft_tokens=2, speculative_ddtree_topk=1)
    reserve = DDTreeConfig.from_server_args(args).reserve_per_decode  # W 2 + max(L 8, N 2)
    assert hooks.alloc_len_per_decode(lambda sa=None: 2, args) == -(-reserve // 2)  # callers double it
    assert hooks.alloc_len_per_decode(lambda sa=None: 65, _args()) == 65
    other = types.SimpleNamespace(speculative_algorithm="EAGLE")
    assert hooks.alloc_len_per_decode(lambda sa=None: 3, other) == 3
    assert hooks.req_to_token_extra_context_len(lambda sa: 6, args) == 4 + reserve
    assert hooks.req_to_token_extra_context_len(lambda sa: 6, other) == 6


def test_install_hooks_is_idempotent(monkeypatch):
    from sglang.srt.plugins.hook_registry import HookRegistry

    monkeypatch.setattr(hooks, "_installed", False)
    before = {k: len(v) for k, v in HookRegistry._hooks.items()}
    hooks.install_hooks()
    hooks.install_hooks()
    added = {k: len(v) - before.get(k, 0) for k, v in HookRegistry._hooks.items()}
    for target in (hooks._RUNNER, hooks._DUMMY, hooks._ALLOC_LEN, hooks._EXTRA_CTX):
        assert added.get(target) == 1
    for target in (hooks._RUNNER, hooks._DUMMY, hooks._ALLOC_LEN, hooks._EXTRA_CTX):  # leave no trace
        HookRegistry._hooks[target] = HookRegistry._hooks[target][: before.get(target, 0)]


def test_verify_input_tree_properties():
    from sglang_ddtree.worker.info import DDTreeVerifyInput, make_draft_input

    info = DDTreeVerifyInput(draft_token=torch.zeros(8, dtype=torch.long), positions=torch.zeros(8),
                             draft_token_num=4, topk=2, max_depth=3)
    assert info.max_tree_depth == 4 and info.tree_topk == -1 and info.num_tokens_per_req == 4
    assert info.is_verify_input()
    d = make_draft_input(torch.tensor([3, 4], dtype=torch.int32), torch.tensor([10, 11]))
    assert d.bonus_tokens.dtype == torch.int64 and d.is_draft_input()
