"""Round geometry, the drafter's server-args view, the upstream hooks and the SpecInput dataclasses."""

import types

import pytest
import torch

from sglang_ddtree.worker import hooks
from sglang_ddtree.worker.geometry import RoundGeometry, draft_server_args_view, read_draft_block_size


@pytest.mark.parametrize(
    "budget,topk,block,n,depth,width,reserve",
    [(64, 8, 16, 65, 15, 16, 81), (15, 8, 16, 16, 15, 16, 32), (1, 1, 8, 2, 1, 2, 10),
     (3, 2, 16, 4, 3, 4, 20), (512, 8, 16, 513, 15, 16, 529)],
)
def test_geometry(budget, topk, block, n, depth, width, reserve):
    g = RoundGeometry(budget=budget, topk=topk, block_size=block)
    assert (g.num_verify_tokens, g.max_depth, g.accept_width, g.reserve_per_decode) == (n, depth, width, reserve)
    # The reservation covers a lagging committed length (<= W behind) plus the round's writes.
    assert g.reserve_per_decode >= g.accept_width + max(block, n)


def _args(**kw):
    base = dict(speculative_algorithm="DDTREE", speculative_ddtree_budget=15, speculative_ddtree_topk=4,
                speculative_dflash_block_size=8, speculative_num_draft_tokens=16, speculative_eagle_topk=4,
                speculative_draft_model_path="/nonexistent")
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_from_server_args_checks_the_verify_width():
    assert RoundGeometry.from_server_args(_args()) == RoundGeometry(15, 4, 8)
    with pytest.raises(ValueError, match="budget \\+ 1"):
        RoundGeometry.from_server_args(_args(speculative_num_draft_tokens=8))


def test_block_size_from_draft_config(tmp_path):
    (tmp_path / "config.json").write_text('{"dflash_config": {"block_size": 16}}')
    assert read_draft_block_size(str(tmp_path)) == 16
    g = RoundGeometry.from_server_args(_args(speculative_dflash_block_size=None,
                                             speculative_draft_model_path=str(tmp_path)))
    assert g.block_size == 16


def test_draft_view_sees_block_size_and_topk_one():
    args = _args()
    args.__dict__["max_speculative_num_draft_tokens"] = 16  # a cached_property value
    view = draft_server_args_view(args, RoundGeometry(15, 4, 8))
    assert view.speculative_num_draft_tokens == 8 and view.speculative_eagle_topk == 1
    assert "max_speculative_num_draft_tokens" not in view.__dict__
    assert args.speculative_num_draft_tokens == 16 and args.speculative_eagle_topk == 4


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
    assert hooks.runner_get_spec_info(original, _runner("DDTREE", True), 32) == "upstream"
    assert hooks.runner_get_spec_info(original, _runner("DFLASH", False), 32) == "upstream"


def test_warmup_dummy_hook():
    def original(*args):
        return "upstream"

    mask = torch.ones(4, dtype=torch.bool)
    algo = types.SimpleNamespace(name="DDTREE")
    info = hooks.create_dummy_verify_input(original, algo, _args(), mask, 16, False)
    assert info.custom_mask is mask and info.draft_token_num == 16
    assert hooks.create_dummy_verify_input(original, algo, _args(), mask, 8, True) == "upstream"


def test_kv_sizing_hooks():
    args = _args(speculative_ddtree_budget=1, speculative_num_draft_tokens=2, speculative_ddtree_topk=1)
    assert hooks.alloc_len_per_decode(lambda sa=None: 2, args) == 5  # ceil(reserve 10 / 2)
    assert hooks.alloc_len_per_decode(lambda sa=None: 65, _args()) == 65
    other = types.SimpleNamespace(speculative_algorithm="EAGLE")
    assert hooks.alloc_len_per_decode(lambda sa=None: 3, other) == 3
    assert hooks.req_to_token_extra_context_len(lambda sa: 6, args) == 14
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
