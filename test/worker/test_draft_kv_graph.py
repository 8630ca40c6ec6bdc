"""``worker.draft_kv_graph``: the draft-KV append replayed from per-batch-size CUDA graphs writes exactly what the
eager call writes, for captured batch sizes, padded ones (padded rows must write nothing, also when the static
buffers still hold an earlier, larger round's rows) and sizes above the largest graph (the eager call).

The append under test is a stand-in with the upstream call's signature that writes every live row
(offset < commit length) of ``hidden`` into a pool tensor at its slot, mixed with its position, so a wrong gather,
copy, slot, position or commit length changes the pool. The engine-level parity runs cover the upstream append
itself (``scripts/device/ddtree_parity.py``; ``+kveager`` in the benchmarks is the eager call).
"""

import pytest
import torch

from sglang_ddtree.worker import draft_kv_graph
from sglang_ddtree.worker.draft_kv_graph import DraftKVAppendGraphs

W, H, SLOTS = 4, 8, 512


def test_switch_defaults_on_and_names_bad_values(monkeypatch):
    monkeypatch.delenv(draft_kv_graph.ENV, raising=False)
    assert draft_kv_graph.enabled()
    monkeypatch.setenv(draft_kv_graph.ENV, "0")
    assert not draft_kv_graph.enabled()
    monkeypatch.setenv(draft_kv_graph.ENV, "yes")
    with pytest.raises(ValueError, match="SGLANG_DDTREE_DRAFT_KV_GRAPH='yes'"):
        draft_kv_graph.enabled()


def test_graph_batch_size_is_the_smallest_captured_at_least_bs():
    graphs = DraftKVAppendGraphs.__new__(DraftKVAppendGraphs)
    graphs.batch_sizes = [1, 2, 4, 8]
    assert [graphs.graph_bs(b) for b in (1, 2, 3, 4, 5, 8, 9)] == [1, 2, 4, 4, 8, 8, None]


class _Pool:
    """The stand-in append: pool[slot] = hidden row + position, for live rows only."""

    def __init__(self, device):
        self.data = torch.zeros((SLOTS, H), device=device)

    def append(self, *, target_hidden, cache_loc, positions, cache_loc_2d, commit_lens):
        bs, width = cache_loc_2d.shape
        live = (torch.arange(width, device=cache_loc_2d.device).view(1, width) < commit_lens.view(bs, 1)).view(-1)
        values = target_hidden.float() + positions.view(-1, 1).float()
        slots = torch.where(live, cache_loc.view(-1), torch.full_like(cache_loc.view(-1), SLOTS))
        padded = torch.cat([self.data, torch.zeros((1, H), device=self.data.device)])
        padded.index_copy_(0, slots, values)
        self.data.copy_(padded[:SLOTS])


def _round(bs: int, n: int, seed: int, device):
    g = torch.Generator(device="cpu").manual_seed(seed)
    hidden = torch.randn((bs * n, H), generator=g).to(device=device, dtype=torch.bfloat16)
    rows = (torch.arange(bs).view(bs, 1) * n + torch.randint(0, n, (bs, W), generator=g)).view(-1).to(device)
    loc = (torch.randperm(SLOTS - 1, generator=g)[: bs * W] + 1).view(bs, W).to(device)
    positions = torch.randint(0, 1000, (bs * W,), generator=g).to(device)
    lens = torch.randint(1, W + 1, (bs,), generator=g).to(device=device, dtype=torch.int32)
    return hidden, rows, loc, positions, lens


@pytest.mark.gpu
def test_replay_writes_what_the_eager_call_writes():
    device = torch.device("cuda")
    pool, ref = _Pool(device), _Pool(device)
    graphs = DraftKVAppendGraphs(pool.append, batch_sizes=[1, 2, 4, 8], width=W, hidden_dim=H,
                                 dtype=torch.bfloat16, device=device)
    assert sorted(graphs.graphs) == [1, 2, 4, 8]
    for i, bs in enumerate([4, 3, 1, 8, 5, 11, 2, 7]):  # captured, padded (after larger rounds), above the largest
        pool.data.zero_()
        ref.data.zero_()
        hidden, rows, loc, positions, lens = _round(bs, 6, i, device)
        graphs(hidden, rows, loc, positions, lens)
        ref.append(target_hidden=hidden[rows], cache_loc=loc.view(-1), positions=positions, cache_loc_2d=loc,
                   commit_lens=lens)
        torch.cuda.synchronize()
        assert torch.equal(pool.data, ref.data), f"round {i}, bs {bs}"
        assert int((pool.data.abs().sum(1) > 0).sum()) == int(lens.sum()), f"round {i}, bs {bs}: rows written"
