"""CPU: ``DDTreeDraftInput.prepare_for_decode`` (the KV reservation before each round, a host loop over the
requests like upstream's): the host lengths it writes (through NumPy views of upstream's scratch buffers), what it
hands to ``alloc_for_spec_decode``, and the top-k summary, against the rule reserved = max(allocated,
min(committed + reserve_per_decode, row width)); buffers grown by a larger batch keep the rule."""

from types import SimpleNamespace

import torch

from sglang_ddtree.config import DDTreeConfig
from sglang_ddtree.worker import info


def _req(committed, allocated, top_k=-1):
    return SimpleNamespace(kv_committed_len=committed, kv=SimpleNamespace(kv_committed_len=committed,
                                                                          kv_allocated_len=allocated),
                           sampling_params=SimpleNamespace(top_k=top_k))


def _run(monkeypatch, reqs, row_width=4096, draft_input=None):
    cfg = DDTreeConfig(budget=15, topk=8, block_size=16)
    monkeypatch.setattr(info, "get_server_args", lambda: "server args")
    monkeypatch.setattr(info.DDTreeConfig, "from_server_args", classmethod(lambda cls, sa: cfg))
    seen = {}

    def alloc(tree_cache, req_to_token_pool, **kw):
        seen.update(kw)

    monkeypatch.setattr(info, "alloc_for_spec_decode", alloc)
    d = draft_input or info.make_draft_input(torch.zeros(len(reqs), dtype=torch.int64),
                                             torch.zeros(len(reqs), dtype=torch.int64))
    batch = SimpleNamespace(batch_size=lambda: len(reqs), device="cpu", reqs=reqs, tree_cache=None,
                            req_to_token_pool=SimpleNamespace(req_to_token=torch.zeros((4, row_width))),
                            req_pool_indices=torch.arange(len(reqs)))
    d.prepare_for_decode(batch)
    return cfg.reserve_per_decode, batch, seen, d


def test_host_lengths_reservation_and_top_k(monkeypatch):
    reqs = [_req(100, 120), _req(7, 300, top_k=5), _req(4080, 4085, top_k=5)]
    reserve, batch, seen, d = _run(monkeypatch, reqs)
    want = [max(a, min(c + reserve, 4096)) for c, a in ((100, 120), (7, 300), (4080, 4085))]
    assert batch.seq_lens_cpu.tolist() == [100, 7, 4080] and batch.seq_lens_sum == 4187
    assert seen["cur_kv_lens_cpu"].tolist() == [120, 300, 4085] and seen["nxt_kv_lens_cpu"].tolist() == want
    assert seen["cur_kv_lens"].tolist() == [120, 300, 4085] and seen["nxt_kv_lens"].tolist() == want
    assert seen["num_needed_tokens"] == sum(w - a for w, a in zip(want, (120, 300, 4085)))
    assert want[2] == 4096  # capped at the row width
    assert d.max_top_k == 5 and d.uniform_top_k_value is None  # -1 and 5


def test_a_larger_batch_after_a_smaller_one(monkeypatch):
    _, _, _, d = _run(monkeypatch, [_req(10, 10)])
    reqs = [_req(i, i + 3, top_k=2) for i in range(50)]  # beyond the buffers' first capacity (32)
    reserve, batch, seen, d = _run(monkeypatch, reqs, draft_input=d)
    assert batch.seq_lens_cpu.tolist() == list(range(50))
    assert seen["nxt_kv_lens_cpu"].tolist() == [max(i + 3, i + reserve) for i in range(50)]
    assert d.uniform_top_k_value == 2
