"""``worker.draft_kv_graph``: the draft-KV append replayed from per-batch-size CUDA graphs writes exactly what the
eager call writes, for captured batch sizes, padded ones (padded rows must write nothing, also when the static
buffers still hold an earlier, larger round's rows) and sizes above the largest graph (the eager call).

The append under test is a stand-in with the upstream call's signature that writes every live row
(offset < commit length) of ``hidden`` into a pool tensor at its slot, mixed with its position, so a wrong gather,
copy, slot, position or commit length changes the pool. The engine-level parity runs cover the upstream append
itself (``scripts/device/ddtree_parity.py``; ``+kvgraph`` / ``+kveager`` in the benchmarks).
"""

import pytest
import torch

from sglang_ddtree.worker import draft_kv_graph
from sglang_ddtree.worker.draft_kv_graph import DraftKVAppendGraphs

W, H, SLOTS = 4, 8, 512


def test_switch_defaults_on_and_names_bad_values(monkeypatch):
    monkeypatch.delenv(draft_kv_graph.ENV, raising=False)
    assert draft_kv_graph.enabled()  # on since the engine-level feature tests passed with it (module doc)
    monkeypatch.setenv(draft_kv_graph.ENV, "1")
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
    """The stand-in append: pool[slot] = hidden row + position, for live rows only, computed through a workspace
    that it regrows (doubling, the old tensor dropped) when a larger call arrives, as upstream's fused-KV helper
    does."""

    def __init__(self, device):
        self.data = torch.zeros((SLOTS, H), device=device)
        self.workspace = torch.zeros((0, H), device=device)

    def append(self, *, target_hidden, cache_loc, positions, cache_loc_2d=None, commit_lens=None):
        if cache_loc_2d is None:  # upstream's prefill form: every row live
            cache_loc_2d = cache_loc.view(-1, 1)
            commit_lens = torch.ones(cache_loc_2d.shape[0], dtype=torch.int32, device=cache_loc.device)
        bs, width = cache_loc_2d.shape
        rows = bs * width
        if self.workspace.shape[0] < rows:
            self.workspace = torch.empty((max(rows, 2 * self.workspace.shape[0]), H), device=self.data.device)
        live = (torch.arange(width, device=cache_loc_2d.device).view(1, width) < commit_lens.view(bs, 1)).view(-1)
        values = self.workspace[:rows]
        torch.add(target_hidden.float(), positions.view(-1, 1).float(), out=values)
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
                                 dtype=torch.bfloat16, device=device, owners=[pool])
    assert sorted(graphs.graphs) == [1, 2, 4, 8]
    captured_workspace = pool.workspace
    victims = []
    # captured, padded (after larger rounds), above the largest (11: the eager call regrows the workspace, as a
    # prefill does upstream; later replays must keep using their own memory, not the tensors allocated since)
    for i, bs in enumerate([4, 3, 1, 8, 5, 11, 2, 7]):
        if bs == 2:
            assert pool.workspace is not captured_workspace  # regrown by the eager call above the largest graph
            victims = [torch.full((8 * W, H), 7.0, device=device) for _ in range(4)]  # would reuse freed memory
        pool.data.zero_()
        ref.data.zero_()
        hidden, rows, loc, positions, lens = _round(bs, 6, i, device)
        graphs(hidden, rows, loc, positions, lens)
        ref.append(target_hidden=hidden[rows], cache_loc=loc.view(-1), positions=positions, cache_loc_2d=loc,
                   commit_lens=lens)
        torch.cuda.synchronize()
        assert torch.equal(pool.data, ref.data), f"round {i}, bs {bs}"
        assert int((pool.data.abs().sum(1) > 0).sum()) == int(lens.sum()), f"round {i}, bs {bs}: rows written"
        assert all(bool((v == 7.0).all()) for v in victims), f"round {i}, bs {bs}: a replay wrote another tensor"


def test_the_graphs_keep_what_the_owners_hold_at_capture():
    """``held_tensors``: module buffers, an object's tensor attributes and its modules' buffers (upstream's helper
    holds its workspace and a RoPE module); parameters and other attributes are not needed (they are not replaced)."""
    rope = torch.nn.Module()
    rope.register_buffer("cos_sin_cache", torch.zeros(4, 2))
    helper = type("Helper", (), {})()
    helper.workspace, helper.rotary_emb, helper.capacity = torch.zeros(3), rope, 3
    drafter = torch.nn.Linear(2, 2)
    drafter.register_buffer("inv_freq", torch.ones(2))
    kept = draft_kv_graph.held_tensors([helper, None, drafter])
    assert [id(t) for t in kept] == [id(helper.workspace), id(rope.cos_sin_cache), id(drafter.inv_freq)]


def _worker_stand_in(monkeypatch, graphs_sizes=(1, 2, 4)):
    """A DDTreeWorker with only what ``_init_draft_kv_graphs`` reads (draft graphs of ``graphs_sizes``)."""
    from types import SimpleNamespace

    from sglang_ddtree.config import DDTreeConfig
    from sglang_ddtree.worker import worker as worker_mod

    monkeypatch.setattr(worker_mod, "get_tp_group", lambda: SimpleNamespace(world_size=1, rank_in_group=0))
    from collections import namedtuple

    key = namedtuple("GraphKey", "size stream_idx variant_label")  # upstream's full-graph backend keys
    keys = {key(b, None, None): object() for b in graphs_sizes}
    class _Worker(worker_mod.DDTreeWorker):
        target_worker = SimpleNamespace(model_runner=SimpleNamespace(dtype=torch.bfloat16))  # upstream: a property

    w = _Worker.__new__(_Worker)
    w.config = DDTreeConfig(budget=15, topk=4, block_size=16)
    w.draft_model_runner = SimpleNamespace(decode_cuda_graph_runner=SimpleNamespace(backend=SimpleNamespace(_graphs=keys)))
    w.draft_model = SimpleNamespace(fc=SimpleNamespace(in_features=3 * H))
    w.device = "cpu"
    w._append_target_hidden_to_draft_kv_by_loc = lambda **kw: None
    w._fused_kv_helper = SimpleNamespace(workspace=torch.zeros(1))
    return w


def test_worker_builds_the_graphs_for_the_draft_graph_sizes(monkeypatch):
    seen = {}

    class _Graphs:
        def __init__(self, append, **kw):
            seen.update(kw)

    monkeypatch.setenv(draft_kv_graph.ENV, "1")
    monkeypatch.setattr(draft_kv_graph, "DraftKVAppendGraphs", _Graphs)
    w = _worker_stand_in(monkeypatch)
    assert isinstance(w._init_draft_kv_graphs(), _Graphs)
    assert seen["batch_sizes"] == [1, 2, 4] and seen["width"] == w.config.accept_width and seen["hidden_dim"] == 3 * H
    assert seen["owners"] == (w._fused_kv_helper, w.draft_model)  # what the graphs keep alive
    monkeypatch.setenv(draft_kv_graph.ENV, "0")
    assert w._init_draft_kv_graphs() is None  # switched off: the eager call
    monkeypatch.delenv(draft_kv_graph.ENV)
    assert isinstance(w._init_draft_kv_graphs(), _Graphs)  # the default


def test_a_capture_failure_falls_back_to_the_eager_call_with_one_warning(monkeypatch, caplog):
    def fail(*args, **kwargs):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setenv(draft_kv_graph.ENV, "1")
    monkeypatch.setattr(draft_kv_graph, "DraftKVAppendGraphs", fail)
    w = _worker_stand_in(monkeypatch)
    with caplog.at_level("WARNING"):
        assert w._init_draft_kv_graphs() is None
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "draft-KV append graphs not captured (RuntimeError" in warnings[0]
    assert _worker_stand_in(monkeypatch, graphs_sizes=())._init_draft_kv_graphs() is None  # no draft graphs


def _eager_only(calls):
    """Graphs of batch sizes 1 and 2 in bfloat16 with no graph to replay: only the eager call (into ``calls``) may
    run."""
    graphs = DraftKVAppendGraphs.__new__(DraftKVAppendGraphs)
    graphs.batch_sizes, graphs.width = [1, 2], W
    graphs.hidden = torch.zeros((2 * W, H), dtype=torch.bfloat16)
    graphs.append = lambda **kw: calls.append(kw)
    graphs.graphs = {}  # a replay would fail
    return graphs


def test_other_hidden_dtypes_and_sizes_above_the_largest_take_the_eager_call():
    calls = []
    graphs = _eager_only(calls)
    for bs, dtype in ((2, torch.float16), (3, torch.bfloat16)):
        hidden = torch.randn((bs * 6, H)).to(dtype)
        rows = torch.arange(bs * W)
        loc = torch.arange(bs * W).view(bs, W)
        graphs(hidden, rows, loc, rows.clone(), torch.full((bs,), W, dtype=torch.int32))
        assert torch.equal(calls[-1]["target_hidden"], hidden[rows]) and calls[-1]["cache_loc_2d"] is loc
    assert len(calls) == 2


@pytest.mark.gpu
def test_a_root_append_writes_what_the_eager_call_writes_for_a_width_0_round():
    """``append_root`` (width-0 rounds: one row per request, in column 0 of the same graphs) between full rounds
    whose rows and lengths stay in the static buffers: it writes each request's one row at its slot and nothing
    else, as the eager call with that round's width-1 context, captured and padded batch sizes and above the
    largest (the eager call); likewise with no commit lengths (a prefill of 1 token per request: 1 each)."""
    device = torch.device("cuda")
    pool, ref = _Pool(device), _Pool(device)
    graphs = DraftKVAppendGraphs(pool.append, batch_sizes=[1, 2, 4, 8], width=W, hidden_dim=H,
                                 dtype=torch.bfloat16, device=device, owners=[pool])
    g = torch.Generator(device="cpu").manual_seed(5)
    for i, bs in enumerate([8, 3, 4, 1, 8, 5, 11, 7]):
        pool.data.zero_()
        ref.data.zero_()
        if i % 2 == 0:  # a full round first leaves its W columns and lengths in the static buffers
            hidden, rows, loc, positions, lens = _round(bs, 6, 100 + i, device)
            graphs(hidden, rows, loc, positions, lens)
            ref.append(target_hidden=hidden[rows], cache_loc=loc.view(-1), positions=positions, cache_loc_2d=loc,
                       commit_lens=lens)
        hidden = torch.randn((bs, H), generator=g).to(device=device, dtype=torch.bfloat16)
        loc = (torch.randperm(SLOTS - 1, generator=g)[:bs] + 1).to(device)
        positions = torch.randint(0, 1000, (bs,), generator=g).to(device)
        ones = torch.ones(bs, dtype=torch.int32, device=device)
        # every other round as a 1-token prefill appends (worker.prefill): no commit lengths, 1 each
        graphs.append_root(hidden, loc, positions, ones if i % 3 else None)
        ref.append(target_hidden=hidden, cache_loc=loc, positions=positions, cache_loc_2d=loc.view(bs, 1),
                   commit_lens=ones)
        torch.cuda.synchronize()
        assert torch.equal(pool.data, ref.data), f"round {i}, bs {bs}"


def test_a_root_append_above_the_largest_graph_takes_the_eager_call():
    calls = []
    graphs = _eager_only(calls)
    for bs, dtype in ((2, torch.float16), (3, torch.bfloat16)):
        hidden, loc = torch.randn((bs, H)).to(dtype), torch.arange(bs)
        ones = torch.ones(bs, dtype=torch.int32)
        graphs.append_root(hidden, loc, loc + 10, ones)
        kw = calls[-1]
        assert kw["target_hidden"] is hidden and kw["cache_loc"] is loc and kw["commit_lens"] is ones
        assert kw["positions"].tolist() == (loc + 10).tolist() and kw["cache_loc_2d"].shape == (bs, 1)
    assert len(calls) == 2


def test_a_prefill_root_append_above_the_largest_graph_makes_upstreams_prefill_call():
    """``append_root(..., None)`` (worker.prefill: every request extends by 1 token) where no graph fits: the call
    upstream's prefill makes, with no 2-D slots and no commit lengths."""
    calls = []
    graphs = _eager_only(calls)
    for bs, dtype in ((2, torch.float16), (3, torch.bfloat16)):
        hidden, loc = torch.randn((bs, H)).to(dtype), torch.arange(bs)
        graphs.append_root(hidden, loc, loc + 10, None)
        assert sorted(calls[-1]) == ["cache_loc", "positions", "target_hidden"]
        assert calls[-1]["target_hidden"] is hidden and calls[-1]["cache_loc"] is loc
    assert len(calls) == 2


def test_a_prefill_root_append_sets_every_commit_length_to_1_and_pads_with_0():
    """The replay path of ``append_root(..., None)`` on the CPU, the graph itself stood in for: column 0 of the
    static buffers takes the rows, slots and positions, the commit lengths are 1 for the batch and 0 in the padded
    rows (which write nothing), and the graph of the padded size replays."""
    graphs = DraftKVAppendGraphs.__new__(DraftKVAppendGraphs)
    graphs.batch_sizes, graphs.width = [1, 2, 4], W
    graphs.hidden = torch.zeros((4 * W, H), dtype=torch.bfloat16)
    graphs.loc_2d = torch.zeros((4, W), dtype=torch.int64)
    graphs.positions = torch.zeros((4 * W,), dtype=torch.int64)
    graphs.lens = torch.full((4,), 7, dtype=torch.int32)  # an earlier round's lengths
    replayed = []
    graphs.graphs = {b: type("G", (), {"replay": lambda self, b=b: replayed.append(b)})() for b in (1, 2, 4)}
    graphs.append = lambda **kw: pytest.fail("the eager call ran")
    hidden = torch.randn((3, H)).to(torch.bfloat16)
    loc, positions = torch.tensor([5, 9, 2]), torch.tensor([40, 41, 7])
    graphs.append_root(hidden, loc, positions, None)
    assert replayed == [4] and graphs.lens.tolist() == [1, 1, 1, 0]
    assert torch.equal(graphs.hidden.view(4, W, H)[:3, 0], hidden)
    assert graphs.loc_2d[:3, 0].tolist() == [5, 9, 2] and graphs.positions.view(4, W)[:3, 0].tolist() == [40, 41, 7]
