"""The routing and bookkeeping of DDTREE's host-sync-free flashinfer plan (``worker/flashinfer_plan.py``), on CPU
with stand-ins for FlashInfer's graph wrapper and SGLang's prefill index updater: an eligible replay refreshes
exactly the wrapper's device buffers and hands FlashInfer's scheduler host bounds in plan()'s argument order,
never calling upstream; anything it does not handle goes to upstream's ``call_begin_forward`` with the call's
own arguments, untouched. The attention it schedules is checked on the GPU (``test_flashinfer_plan_gpu.py``).
"""

import types

import pytest
import torch

from sglang_ddtree.worker import flashinfer_plan as fp
from sglang_ddtree.worker import hooks

N, BS, HEADS, KV_HEADS, HEAD_DIM = 16, 3, 32, 8, 128


PADDED, CHUNK = 40, 64  # the fake schedule's work-item capacity and KV chunk size


def _plan_info(total_rows, cta_tile_q=64, split=1):
    """A PrefillPlanInfo as FlashInfer 0.6.14 returns it (15 fields), its arrays at 16-byte aligned offsets."""
    off, at = 0, {}
    for name, size in (("request", 4 * PADDED), ("qo", 4 * PADDED), ("kv", 4 * PADDED), ("o", 4 * (BS + 1)),
                       ("chunk", 4), ("rows", 4), ("merge", 4 * (total_rows + 1)), ("valid", PADDED)):
        at[name], off = off, -(-(off + size) // 16) * 16
    return [PADDED, total_rows, at["rows"], cta_tile_q, at["request"], at["qo"], at["kv"], at["merge"], at["o"],
            at["chunk"], 0, 0, at["valid"], 1, split]


class _Module:
    """FlashInfer's fa2 module: plan() records its arguments, writes the chunk size where the plan info says
    (as its host-to-device copy would) and returns the plan info."""

    def __init__(self, info=None):
        self.calls, self.info = [], info

    def plan(self, *args):
        self.calls.append(args)
        info = self.info if self.info is not None else _plan_info(args[6])
        if len(info) == fp.PLAN_INFO_FIELDS:
            args[1][info[9]:info[9] + 4].view(torch.int32)[0] = CHUNK
        return info


def _wrapper(mask_capacity=4096, indices=4096):
    return types.SimpleNamespace(
        is_cuda_graph_enabled=True, _backend="fa2", _cached_module=_Module(),
        _float_workspace_buffer=torch.zeros(4), _int_workspace_buffer=torch.full((2048,), 0x5A, dtype=torch.uint8),
        _pin_memory_int_workspace_buffer=torch.zeros(4, dtype=torch.int32), _max_total_num_rows=BS * N,
        _qo_indptr_buf=torch.full((BS + 1,), -7, dtype=torch.int32),
        _paged_kv_indptr_buf=torch.full((BS + 1,), -7, dtype=torch.int32),
        _paged_kv_last_page_len_buf=torch.full((BS,), -7, dtype=torch.int32),
        _paged_kv_indices_buf=torch.full((indices,), -7, dtype=torch.int32),
        _custom_mask_buf=torch.full((mask_capacity,), 0xA5, dtype=torch.uint8),
        _mask_indptr_buf=torch.full((BS + 1,), -7, dtype=torch.int32))


class _Spec:
    """A verify input as upstream's plan sees it: N rows per request over prefix + N keys, a FULL_MASK."""

    def __init__(self, with_mask=True, seed=0):
        self.draft_token_num, self.with_mask, self.seed = N, with_mask, seed

    def generate_attn_arg_prefill(self, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, req_to_token):
        kv_lens = paged_kernel_lens.to(torch.int32) + N
        kv_indptr = torch.zeros(len(kv_lens) + 1, dtype=torch.int32)
        kv_indptr[1:] = torch.cumsum(kv_lens, 0)
        qo_indptr = torch.arange(0, (len(kv_lens) + 1) * N, N, dtype=torch.int32)
        kv_indices = torch.arange(paged_kernel_lens_sum + N * len(kv_lens), dtype=torch.int32) + 1000
        mask = None
        if self.with_mask:
            g = torch.Generator().manual_seed(self.seed)
            mask = torch.rand(int((kv_lens * N).sum()) + 40, generator=g) < 0.5
        self.last = (kv_indices, kv_indptr, qo_indptr, mask)
        return self.last


def _updater(serves=True, page_size=1, dispatch_reason=None):
    u = types.SimpleNamespace(attn_backend=types.SimpleNamespace(dispatch_reason=dispatch_reason, page_size=page_size),
                              req_to_token=torch.zeros(8, 512, dtype=torch.int32),
                              kv_last_page_len=torch.ones(64, dtype=torch.int32), num_qo_heads=HEADS,
                              num_kv_heads=KV_HEADS, head_dim=HEAD_DIM)
    setattr(u, fp._SERVES, serves)
    setattr(u, fp._LAG, N)  # W of a budget-15 DDTREE: lags are at most one round's commit
    return u


def _call(updater, wrapper, spec, **overrides):
    """call_begin_forward as upstream's update_single_wrapper makes it for a target-verify graph replay."""
    prefix = torch.tensor([100, 7, 1])  # device committed lengths; row 2 a graph pad row (fill value 1)
    host = torch.tensor([100 + N + 3, 7 + N, 1])  # the worker's bound (+3 lag) and the pad row's fill
    positional = dict(wrapper_ragged="ragged", wrapper_paged=wrapper, req_pool_indices=torch.tensor([4, 5, 0]),
                      paged_kernel_lens=prefix, paged_kernel_lens_sum=int(prefix.sum()), seq_lens=prefix,
                      prefix_lens=None, kv_start_idx=None, kv_indptr="kv_indptr_buf", qo_indptr="qo_indptr_buf",
                      use_ragged=False, spec_info=spec)
    kwargs = dict(fixed_split_size=None, multi_item_params=None, seq_lens_cpu=host)
    for k, v in overrides.items():
        (positional if k in positional else kwargs)[k] = v
    seen = []

    def original(*args, **kw):
        seen.append((args, kw))
        return "upstream"

    out = fp.call_begin_forward(original, updater, *positional.values(), **kwargs)
    return out, seen, positional, kwargs


def test_an_eligible_replay_plans_without_upstream():
    wrapper, spec, updater = _wrapper(), _Spec(), _updater()
    out, seen, pos, kw = _call(updater, wrapper, spec)
    assert out is None and seen == []
    kv_indices, kv_indptr, qo_indptr, mask = spec.last
    assert torch.equal(wrapper._qo_indptr_buf, qo_indptr) and torch.equal(wrapper._paged_kv_indptr_buf, kv_indptr)
    assert (wrapper._paged_kv_last_page_len_buf == 1).all()
    assert torch.equal(wrapper._paged_kv_indices_buf[:kv_indices.numel()], kv_indices)
    assert (wrapper._paged_kv_indices_buf[kv_indices.numel():] == -7).all()
    want_mask = torch.zeros_like(wrapper._custom_mask_buf)
    want_indptr = torch.zeros(BS + 1, dtype=torch.int32)
    fp.pack_tree_mask_torch(mask, qo_indptr, kv_indptr, want_mask, want_indptr)
    used = int(want_indptr[-1])
    assert torch.equal(wrapper._mask_indptr_buf, want_indptr)
    assert torch.equal(wrapper._custom_mask_buf[:used], want_mask[:used])
    assert (wrapper._custom_mask_buf[used:] == 0xA5).all()
    # FlashInfer's scheduler: plan()'s fa2 argument order, host bounds of every device length
    (call,) = wrapper._cached_module.calls
    qo_h, kv_h, kv_lens_h = call[3], call[4], call[5]
    assert call[:2] == (wrapper._float_workspace_buffer, wrapper._int_workspace_buffer)
    # the host schedule goes through a ring buffer like the wrapper's pinned one, never the wrapper's own
    pinned = wrapper._pin_memory_int_workspace_buffer
    assert call[2] is not pinned and call[2].shape == pinned.shape and call[2].dtype == pinned.dtype
    assert call[6:] == (BS * N, BS, HEADS, KV_HEADS, 1, True, HEAD_DIM, HEAD_DIM, False, -1, -1, False, 0)
    assert torch.equal(qo_h, qo_indptr) and qo_h.device.type == kv_h.device.type == kv_lens_h.device.type == "cpu"
    device_kv = kv_indptr[1:] - kv_indptr[:-1]
    assert (kv_lens_h >= device_kv).all() and torch.equal(kv_h[1:], torch.cumsum(kv_lens_h, 0).to(torch.int32))
    assert wrapper._plan_info == _plan_info(BS * N) and wrapper._batch_size == BS and wrapper._max_q_len == N
    assert wrapper._max_kv_len == int(kv_lens_h.max()) and wrapper._qo_indptr_last == BS * N
    # the split-KV work list rewritten for the DEVICE key counts [116, 23, 17] in chunks of 64 (the bounds, 135 /
    # 39 / 17, would give request 0 three chunks): 2 + 1 + 1 work items, o / merge offsets of 2, 1, 1 chunks a row
    lay = fp.split_layout(wrapper, wrapper._plan_info, BS, N, HEADS // KV_HEADS)
    assert lay.q_tiles == 1  # 16 rows x GQA 4 = 64 = one tile
    assert lay.request[:4].tolist() == [0, 0, 1, 2] and lay.kv_tile[:4].tolist() == [0, 1, 0, 0]
    assert lay.qo_tile[:4].tolist() == [0] * 4 and lay.valid.tolist() == [1] * 4 + [0] * (PADDED - 4)
    assert lay.o_indptr.tolist() == [0, 2 * N, 3 * N, 4 * N]
    assert lay.merge_indptr.tolist() == ([0] + [2 * (r + 1) for r in range(N)] + [2 * N + r + 1 for r in range(N)]
                                         + [3 * N + r + 1 for r in range(N)])
    assert int((kv_lens_h[0] + CHUNK - 1) // CHUNK) == 3, "the case must give the bound one chunk more"


def test_a_plan_info_it_cannot_read_goes_to_upstream(caplog):
    """A schedule that is not a CUDA-graph split-KV prefill plan of FlashInfer 0.6.14's layout: upstream's
    call_begin_forward runs (once, with the call's own arguments) and one warning says so."""
    info = _plan_info(BS * N, split=0)
    wrapper = _wrapper()
    wrapper._cached_module = _Module(info=info)
    fp._warned.discard("plan info")
    with caplog.at_level("WARNING"):
        out, seen, pos, kw = _call(_updater(), wrapper, _Spec())
        _call(_updater(), wrapper, _Spec())
    assert out == "upstream" and len(seen) == 1 and seen[0][1] == kw
    assert sum("not a CUDA-graph split-KV prefill plan" in r.message for r in caplog.records) == 1


def test_the_draft_block_has_no_mask_to_pack():
    wrapper = _wrapper()
    out, seen, _, _ = _call(_updater(), wrapper, _Spec(with_mask=False))
    assert out is None and seen == [] and len(wrapper._cached_module.calls) == 1
    assert (wrapper._custom_mask_buf == 0xA5).all() and (wrapper._mask_indptr_buf == -7).all()


@pytest.mark.parametrize("case", [
    "switch off", "eager wrapper", "other flashinfer backend", "no plan yet", "ragged", "kv_start_idx",
    "no host lengths", "host lengths of another batch", "no spec info", "page 16", "sliding window dispatch",
    "fixed split", "window", "multi-item", "custom kv indices", "a newer release's keyword", "mask past the buffer",
    "indices past the buffer", "more rows than captured",
])
def test_anything_else_goes_to_upstream_untouched(case):
    wrapper, spec = _wrapper(), _Spec()
    updater = _updater(serves=case != "switch off", page_size=16 if case == "page 16" else 1,
                       dispatch_reason="SLIDING_WINDOW" if case == "sliding window dispatch" else None)
    overrides = {
        "ragged": dict(use_ragged=True), "kv_start_idx": dict(kv_start_idx=torch.zeros(3, dtype=torch.int32)),
        "no host lengths": dict(seq_lens_cpu=None), "host lengths of another batch": dict(seq_lens_cpu=torch.ones(2)),
        "no spec info": dict(spec_info=None), "fixed split": dict(fixed_split_size=64), "window": dict(window_left=128),
        "multi-item": dict(multi_item_params=object()), "custom kv indices": dict(custom_kv_indices=torch.zeros(3)),
        "a newer release's keyword": dict(plan=object()),
    }.get(case, {})
    if case == "eager wrapper":
        wrapper.is_cuda_graph_enabled = False
    elif case == "other flashinfer backend":
        wrapper._backend = "fa3"
    elif case == "no plan yet":
        wrapper._cached_module = None
    elif case == "mask past the buffer":
        wrapper._custom_mask_buf = torch.full((64,), 0xA5, dtype=torch.uint8)
    elif case == "indices past the buffer":
        wrapper._paged_kv_indices_buf = torch.full((32,), -7, dtype=torch.int32)
    elif case == "more rows than captured":
        wrapper._max_total_num_rows = BS * N - 1
    before = {k: v.clone() for k, v in vars(wrapper).items() if torch.is_tensor(v)}
    out, seen, pos, kw = _call(updater, wrapper, spec, **overrides)
    assert out == "upstream" and len(seen) == 1
    args, kwargs = seen[0]
    assert args[0] is updater and list(args[1:]) == list(pos.values()) and kwargs == kw
    assert all(torch.equal(v, before[k]) for k, v in vars(wrapper).items() if torch.is_tensor(v))
    assert wrapper._cached_module is None or wrapper._cached_module.calls == []


def test_the_switch_and_what_it_registers(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec

    def find_spec(present):
        return lambda name, *a: (object() if present else None) if name == "flashinfer" else real(name, *a)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec(True))
    monkeypatch.delenv(fp.ENV, raising=False)  # unset: on with the FlashInfer it was written against, else off
    monkeypatch.setattr(fp, "installed_flashinfer", lambda: fp.TESTED_FLASHINFER[0])
    assert fp.enabled() is True and fp.explicitly_enabled() is False
    assert hooks.flashinfer_hook_targets() == hooks.FLASHINFER_HOOK_TARGETS
    monkeypatch.setattr(fp, "installed_flashinfer", lambda: "0.6.18")
    assert fp.enabled() is False and hooks.flashinfer_hook_targets() == {}
    monkeypatch.setenv(fp.ENV, "0")
    monkeypatch.setattr(fp, "installed_flashinfer", lambda: fp.TESTED_FLASHINFER[0])
    assert fp.enabled() is False and hooks.flashinfer_hook_targets() == {}
    monkeypatch.setenv(fp.ENV, "1")
    monkeypatch.setattr(fp, "installed_flashinfer", lambda: "0.6.18")  # validation refuses this (test_server_args)
    assert fp.enabled() is True and fp.explicitly_enabled() is True
    monkeypatch.setattr(importlib.util, "find_spec", find_spec(False))
    assert fp.enabled() is True and hooks.flashinfer_hook_targets() == {}  # no flashinfer: nothing to hook
    monkeypatch.setattr(importlib.util, "find_spec", find_spec(True))
    assert hooks.flashinfer_hook_targets() == hooks.FLASHINFER_HOOK_TARGETS and len(hooks.FLASHINFER_HOOK_TARGETS) == 1
    monkeypatch.setenv(fp.ENV, "yes")
    with pytest.raises(ValueError, match=f"{fp.ENV}='yes': use 1 .* or 0"):
        fp.enabled()


def test_serves_ddtree_needs_the_tested_flashinfer(monkeypatch):
    monkeypatch.setenv(fp.ENV, "1")
    monkeypatch.setattr(fp, "installed_flashinfer", lambda: "0.6.18")
    updater = types.SimpleNamespace()
    assert fp.serves_ddtree(updater) is False and getattr(updater, fp._SERVES) is False  # decided once
    monkeypatch.setattr(fp, "installed_flashinfer", lambda: fp.TESTED_FLASHINFER[0])
    assert fp.serves_ddtree(updater) is False  # cached per updater
    monkeypatch.setenv(fp.ENV, "0")
    assert fp.serves_ddtree(types.SimpleNamespace()) is False
    monkeypatch.delenv(fp.ENV)  # unset, another FlashInfer: off
    monkeypatch.setattr(fp, "installed_flashinfer", lambda: "0.6.18")
    assert fp.serves_ddtree(types.SimpleNamespace()) is False


def test_serves_ddtree_reads_the_servers_args_once(monkeypatch):
    """On: the DDTREE server's W (the most a host length lags) is kept on the updater for the bounds."""
    from sglang_ddtree.config import DDTreeConfig

    monkeypatch.setenv(fp.ENV, "1")
    monkeypatch.setattr(fp, "installed_flashinfer", lambda: fp.TESTED_FLASHINFER[0])
    args = types.SimpleNamespace(name="ddtree args")
    monkeypatch.setattr("sglang.srt.runtime_context.get_server_args", lambda: args)
    monkeypatch.setattr(fp, "is_validated_ddtree_args", lambda a: a is args)
    monkeypatch.setattr(DDTreeConfig, "from_server_args",
                        classmethod(lambda cls, a: types.SimpleNamespace(accept_width=12 if a is args else -1)))
    updater = types.SimpleNamespace()
    assert fp.serves_ddtree(updater) is True and getattr(updater, fp._LAG) == 12
    monkeypatch.setattr(fp, "is_validated_ddtree_args", lambda a: False)  # a DFLASH server: upstream's plan
    other = types.SimpleNamespace()
    assert fp.serves_ddtree(other) is False and not hasattr(other, fp._LAG)


def test_each_plan_stages_its_schedule_in_the_next_ring_buffer():
    """A plan queued on the stream reads its host buffer when the copy runs: the next RING_SIZE - 1 plans of that
    size must not write it (round k + 1 is planned while round k's copies may still be queued)."""
    wrapper, updater = _wrapper(), _updater()
    for seed in range(fp.RING_SIZE + 2):
        _call(updater, wrapper, _Spec(seed=seed))
    staged = [call[2] for call in wrapper._cached_module.calls]
    ids = [t.data_ptr() for t in staged]
    assert len(set(ids[:fp.RING_SIZE])) == fp.RING_SIZE  # RING_SIZE plans in a row: all distinct
    assert ids[fp.RING_SIZE:] == ids[:2]  # then the oldest again, in turn
    assert all(t.data_ptr() != wrapper._pin_memory_int_workspace_buffer.data_ptr() for t in staged)
    # another size gets its own ring (a wrapper of other workspace size does not advance this one)
    other = _wrapper()
    other._pin_memory_int_workspace_buffer = torch.zeros(8, dtype=torch.int32)
    _call(updater, other, _Spec())
    assert other._cached_module.calls[0][2].numel() == 8
    _call(updater, wrapper, _Spec())
    assert wrapper._cached_module.calls[-1][2].data_ptr() == ids[2]


def test_ring_hands_out_buffers_in_turn_and_keeps_them():
    ring = fp._PinnedRing(size=3)
    like = torch.zeros(5, dtype=torch.uint8)
    got = [ring.take(like) for _ in range(7)]
    assert [g.data_ptr() for g in got[3:]] == [g.data_ptr() for g in got[:3]] + [got[0].data_ptr()]
    assert len({g.data_ptr() for g in got[:3]}) == 3
    assert all(g.shape == like.shape and g.dtype == like.dtype and not g.is_pinned() for g in got)
