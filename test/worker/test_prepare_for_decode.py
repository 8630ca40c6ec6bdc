"""CPU: ``DDTreeDraftInput.prepare_for_decode`` (the KV reservation before each round, a host loop over the
requests like upstream's): the host lengths it writes (through NumPy views of upstream's scratch buffers), what it
hands to ``alloc_for_spec_decode``, and the top-k summary, against the rule: a request whose allocation covers
floor = min(committed + reserve_per_decode, row width) keeps it; one that falls short tops up to
min(committed + 2 * reserve_per_decode, row width), or, where the allocator has no room for the top-ups, to the floor
exactly; a round where nobody falls short does not call the allocator. Buffers grown by a larger batch keep the rule."""

from types import SimpleNamespace

import torch

from sglang_ddtree.config import DDTreeConfig
from sglang_ddtree.worker import info


def _req(committed, allocated, top_k=-1):
    return SimpleNamespace(kv_committed_len=committed, kv=SimpleNamespace(kv_committed_len=committed,
                                                                          kv_allocated_len=allocated),
                           sampling_params=SimpleNamespace(top_k=top_k))


def _run(monkeypatch, reqs, row_width=4096, draft_input=None, available=10**9):
    cfg = DDTreeConfig(budget=15, topk=8, block_size=16)
    monkeypatch.setattr(info, "get_server_args", lambda: "server args")
    monkeypatch.setattr(info.DDTreeConfig, "from_server_args", classmethod(lambda cls, sa: cfg))
    seen = {}

    def alloc(tree_cache, req_to_token_pool, **kw):
        assert not seen, "one allocation per round"
        seen.update(kw)

    monkeypatch.setattr(info, "alloc_for_spec_decode", alloc)
    d = draft_input or info.make_draft_input(torch.zeros(len(reqs), dtype=torch.int64),
                                             torch.zeros(len(reqs), dtype=torch.int64))
    batch = SimpleNamespace(batch_size=lambda: len(reqs), device="cpu", reqs=reqs, tree_cache=None,
                            req_to_token_pool=SimpleNamespace(req_to_token=torch.zeros((4, row_width))),
                            req_pool_indices=torch.arange(len(reqs)),
                            token_to_kv_pool_allocator=SimpleNamespace(available_size=lambda: available, page_size=1))
    d.prepare_for_decode(batch)
    return cfg.reserve_per_decode, batch, seen, d


def _recorded(d):
    """The reserved lengths and their sum as recorded for this SGLang release (``compat``)."""
    from sglang_ddtree.compat import adapter

    total = getattr(d, "reserved_seq_lens_sum", getattr(d, "nxt_kv_lens_sum", None))
    return adapter().reserved_lens_cpu(d).tolist(), total


def test_host_lengths_reservation_and_top_k(monkeypatch):
    reqs = [_req(100, 120), _req(7, 300, top_k=5), _req(4080, 4085, top_k=5)]
    reserve, batch, seen, d = _run(monkeypatch, reqs)
    assert reserve == 32  # budget 15, block 16: W 16 + 16 slots
    # 100: short of 132, tops up to 164; 7: covers 39 with 300, keeps it; 4080: short, tops up to the row width
    want = [100 + 2 * reserve, 300, 4096]
    assert batch.seq_lens_cpu.tolist() == [100, 7, 4080] and batch.seq_lens_sum == 4187
    assert seen["cur_kv_lens_cpu"].tolist() == [120, 300, 4085] and seen["nxt_kv_lens_cpu"].tolist() == want
    assert seen["cur_kv_lens"].tolist() == [120, 300, 4085] and seen["nxt_kv_lens"].tolist() == want
    assert seen["num_needed_tokens"] == sum(w - a for w, a in zip(want, (120, 300, 4085)))
    assert _recorded(d) == (want, sum(want))
    assert d.max_top_k == 5 and d.uniform_top_k_value is None  # -1 and 5


def test_rounds_whose_allocations_cover_them_call_no_allocator(monkeypatch):
    """A request that topped up covers the next rounds: until its committed length comes within a reserve of its
    allocation, nothing is allocated (a width-0 round commits one token a round)."""
    reserve = DDTreeConfig(budget=15, topk=8, block_size=16).reserve_per_decode
    allocated = 10 + 2 * reserve  # what a top-up at committed 10 gave
    for committed in (10, 11, 10 + reserve):  # floor = committed + reserve <= allocated
        _, batch, seen, d = _run(monkeypatch, [_req(committed, allocated), _req(5, 5 + reserve)])
        assert seen == {} and batch.seq_lens_cpu.tolist() == [committed, 5]
        assert _recorded(d) == ([allocated, 5 + reserve], allocated + 5 + reserve)
    _, _, seen, _ = _run(monkeypatch, [_req(11 + reserve, allocated), _req(5, 5 + reserve)])
    assert seen["nxt_kv_lens_cpu"].tolist() == [11 + 3 * reserve, 5 + reserve]  # the first one tops up again
    assert seen["num_needed_tokens"] == 11 + 3 * reserve - allocated


def test_without_room_for_the_top_ups_the_round_reserves_exactly_its_floor(monkeypatch):
    reserve = DDTreeConfig(budget=15, topk=8, block_size=16).reserve_per_decode
    reqs = [_req(100, 120), _req(7, 300), _req(50, 50)]
    exact = [100 + reserve, 300, 50 + reserve]
    short = (100 + reserve - 120) + reserve
    topped = (100 + 2 * reserve - 120) + 2 * reserve
    _, _, seen, d = _run(monkeypatch, reqs, available=topped + len(reqs) - 1)  # short of a slot per request spare
    assert seen["nxt_kv_lens_cpu"].tolist() == exact and seen["nxt_kv_lens"].tolist() == exact
    assert seen["num_needed_tokens"] == short
    assert _recorded(d) == (exact, sum(exact))
    _, _, seen, _ = _run(monkeypatch, reqs, available=topped + len(reqs))  # room enough: the top-ups
    assert seen["num_needed_tokens"] == topped


def test_a_larger_batch_after_a_smaller_one(monkeypatch):
    _, _, _, d = _run(monkeypatch, [_req(10, 10)])
    reqs = [_req(i, i + 3, top_k=2) for i in range(50)]  # beyond the buffers' first capacity (32)
    reserve, batch, seen, d = _run(monkeypatch, reqs, draft_input=d)
    assert batch.seq_lens_cpu.tolist() == list(range(50))
    assert seen["nxt_kv_lens_cpu"].tolist() == [i + 2 * reserve for i in range(50)]
    assert d.uniform_top_k_value == 2
