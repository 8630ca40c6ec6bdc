"""The worker's decode round (``DDTreeWorker._decode_round``, production code) on CPU, against a stand-in target
and drafter: every round's output extends the target's own greedy sequence, token for token.

What is real here: the round itself with its BUILD (tree rounds: ``build_tree``, ``verify_topology``; chain-shaped
rounds: ``chain_inputs``), the verify input it hands the target, the ACCEPT + COMMIT (PyTorch path), the KV moves
it asks for, the drafter's new context, the next round's state and budget auto's ``finish`` call. What stands in:
  - the target's verify forward: it writes each verify row's token into a slot -> token "KV" at the row's
    ``verify_loc`` slot, then gives each row the logits of a fixed function of (the committed tokens it reads
    from that KV through req_to_token, the tokens of the rows it may attend, its position). Which rows a row may
    attend comes from what the backend of the round reads: the ancestor bits when the round hands them over (fa3's
    fused tree attention), else, on a backend built at top-K 1, causal attention (upstream's fa3 verify of a
    chain), else the FULL_MASK; a position that disagrees with the row's depth fails the test;
  - the KV mover applies the round's (target, source) pairs to that KV as the kernel does (live entries only);
  - the drafter proposes top-K tokens per block position, the target's true continuation at a random rank or not
    at all;
  - budget auto's choice is a fixed script that changes the width from round to round (0, the chain and trees).
So a chain-shaped round that left a KV row where the next round does not read it, a causal round whose backend
would read a mask it was not given, a wrong position or a wrong drafter context all show up as a wrong token or
a failed check. The GPU runs of the same paths are ``ddtree_parity.py`` (``bash scripts/device/issue13.sh chain``).
"""

import contextlib
from types import SimpleNamespace

import pytest
import torch

from sglang_ddtree.config import ChainBucket, DDTreeConfig, is_chain

VOCAB = 40
MAXLEN = 256
HIDDEN = 3  # the stand-in target's hidden row: (token, position, 1)


class StandInTarget:
    """The target's greedy choice after a context: a fixed random table of (last two tokens, position mod 5)."""

    def __init__(self, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.table = torch.randint(VOCAB, (VOCAB, VOCAB, 5), generator=g)

    def next_token(self, context) -> int:
        return int(self.table[context[-1], context[-2] if len(context) > 1 else 0, len(context) % 5])

    def rollout(self, prompt, steps):
        seq = list(prompt)
        for _ in range(steps):
            seq.append(self.next_token(seq))
        return seq


class Harness:
    """Requests, their slots and KV, and the stand-ins the worker's round calls."""

    def __init__(self, config, *, bs, seed, fa3_bits=False, script=None, forecast_every=0, temperature=0.0,
                 heads=None, mask_capacity=None):
        from sglang_ddtree.worker import worker as worker_mod

        self.config, self.bs, self.fa3_bits, self.temperature = config, bs, fa3_bits, temperature
        self.g = torch.Generator().manual_seed(seed + 1)
        self.target = StandInTarget(seed)
        prompts = [torch.randint(VOCAB, (int(torch.randint(3, 9, (1,), generator=self.g)),), generator=self.g).tolist()
                   for _ in range(bs)]
        self.oracle = [self.target.rollout(p, 160) for p in prompts]
        self.req_to_token = (torch.arange(bs * MAXLEN, dtype=torch.int32).view(bs, MAXLEN) + 1)  # slot 0: dummy
        self.kv = torch.full((bs * MAXLEN + 1,), -1, dtype=torch.int64)
        self.seq_lens = [len(p) for p in prompts]  # committed KV length = the root's position
        for b, p in enumerate(prompts):
            self.kv[self.req_to_token[b, :len(p)].long()] = torch.tensor(p)
        self.bonus = [self.oracle[b][len(prompts[b])] for b in range(bs)]  # prefill's token, not yet in the KV
        self.emitted = [[] for _ in range(bs)]
        self.script, self.forecast_every = list(script or []), forecast_every

        w = worker_mod.DDTreeWorker.__new__(worker_mod.DDTreeWorker)
        w.config, w.device, w._hybrid, w._chains = config, torch.device("cpu"), False, None
        w._fa3_tree_bits, w._draft_kv_graphs, w._warned_host_sync, w._heads = fa3_bits, None, False, None
        mr = SimpleNamespace(attn_backend=SimpleNamespace(topk=config.topk), max_running_requests=2,  # small: the chains grow on demand
                             req_to_token_pool=SimpleNamespace(req_to_token=self.req_to_token))
        w.model_runner, w._target_worker = mr, SimpleNamespace(model_runner=mr)
        w._move_kv = self._move
        w._draft = self._draft
        w._verify = self._verify
        w._append_target_hidden_to_draft_kv_by_loc = self._append
        w._auto = _ScriptedAuto(self) if config.adaptive else None
        w._widths = _Widths(config, mr) if config.adaptive else None
        if heads is not None:  # the head graphs (the default on fa3): their static buffers, replayed eagerly on the CPU
            w._heads = _counting_heads(self, w, heads, mask_capacity if mask_capacity is not None else bs * MAXLEN)
        self.worker = w
        self._round = None

    # -- stand-ins --
    def _draft(self, batch, draft_input, bs, host):
        depth, k = self.config.block_size - 1, self.config.topk
        lp = torch.randn(bs, depth, k, generator=self.g).log_softmax(-1).sort(-1, descending=True).values
        ids = torch.empty(bs, depth, k, dtype=torch.int64)
        for b in range(bs):
            p = int(batch.seq_lens[b])
            for j in range(depth):
                perm = torch.randperm(VOCAB, generator=self.g)[:k]
                truth = self.oracle[b][p + 1 + j]
                perm = perm[perm != truth][:k - 1] if k > 1 else perm[:0]
                u = float(torch.rand((), generator=self.g))
                rank = 0 if u < 0.65 else (int(torch.randint(k, (1,), generator=self.g)) if u < 0.9 else None)
                row = perm.tolist()
                if rank is None:
                    row = (row + [t for t in range(VOCAB) if t != truth and t not in row])[:k]
                else:
                    row.insert(rank, truth)
                ids[b, j] = torch.tensor(row[:k])
        self._round["top1"] = ids[:, :, 0].clone()
        return lp, ids

    def _verify(self, batch, vi, verify_loc, verify_cpu, verify_sum):
        bs, n = len(batch.seq_lens), int(vi.draft_token_num)
        tokens, positions, loc = vi.draft_token.view(bs, n), vi.positions.view(bs, n), verify_loc.view(bs, n)
        backend = self.worker.target_worker.model_runner.attn_backend
        causal = vi.tree_bits is None and vi.custom_mask is None
        entry = self._round
        entry["mask"], entry["bits"] = vi.custom_mask is not None, vi.tree_bits is not None
        if causal:  # only a backend built at top-K 1 verifies without a mask (upstream's fa3 chain verify)
            assert backend.topk == 1, "a round without mask or bits on a tree backend"
        if self.fa3_bits and backend.topk > 1:
            assert vi.tree_bits is not None, "fa3's fused tree attention reads bits"
        if vi.tree_bits is not None:
            from sglang_ddtree.worker.tree_attention import _unpack_bits

            allowed = _unpack_bits(vi.tree_bits, n).view(bs, n, n)
        elif not causal:
            allowed = torch.zeros(bs, n, n, dtype=torch.bool)
            off = 0
            for b in range(bs):
                p = int(batch.seq_lens[b])
                rows = vi.custom_mask[off:off + n * (p + n)].view(n, p + n)
                assert bool(rows[:, :p].all()), "every row sees the whole prefix"
                allowed[b] = rows[:, p:]
                off += n * (p + n)
        else:
            allowed = torch.ones(n, n, dtype=torch.bool).tril().expand(bs, n, n)
        if vi.retrieve_index is not None:  # the links upstream's hybrid kernels derive parents from: the same tree
            assert vi.retrieve_index.view(bs, n).tolist() == [[b * n + i for i in range(n)] for b in range(bs)]
            for b in range(bs):
                nxt, sib = vi.retrieve_next_token[b].tolist(), vi.retrieve_next_sibling[b].tolist()
                parent = [-1] * n
                for i in range(n):  # rows in order: parent row < child row, siblings chained upwards
                    if nxt[i] >= 0:
                        parent[nxt[i]] = i
                    if sib[i] >= 0:
                        parent[sib[i]] = parent[i]
                for i in range(n):
                    path, cur = set(), i
                    while cur >= 0 and cur not in path:  # a cycle (bad links) stops here and fails below
                        path.add(cur)
                        cur = parent[cur]
                    assert cur < 0, ("the links make a cycle", b, i)
                    assert path == {j for j in range(n) if bool(allowed[b, i, j])}, (b, i)
        else:
            assert causal, "only a causal round goes without links"
        self.kv[loc.reshape(-1)] = tokens.reshape(-1)  # the verify writes every row's KV at its slot
        logits = torch.randn(bs * n, VOCAB, generator=self.g)
        hidden = torch.zeros(bs * n, HIDDEN)
        for b in range(bs):
            p = int(batch.seq_lens[b])
            committed = self.kv[self.req_to_token[b, :p].long()].tolist()
            assert -1 not in committed
            for i in range(n):
                path = [j for j in range(n) if bool(allowed[b, i, j])]
                assert path and path[-1] == i, "a row attends itself"
                assert int(positions[b, i]) == p + len(path) - 1, "position = prefix + depth"
                context = committed + [int(self.kv[int(loc[b, j])]) for j in path]
                logits[b * n + i, self.target.next_token(context)] += 50.0
                hidden[b * n + i] = torch.tensor([float(tokens[b, i]), float(positions[b, i]), 1.0])
        out = SimpleNamespace(next_token_logits=logits, hidden_states=hidden)
        return out, SimpleNamespace(), True

    def _move(self, c, width):
        self._round["moved"] = True
        bs = c.accept_lens.shape[0]
        tgt, src = c.kv_tgt.view(bs, width), c.kv_src.view(bs, width)
        for b in range(bs):
            live = [d for d in range(int(c.accept_lens[b])) if int(tgt[b, d]) != int(src[b, d])]
            vals = [int(self.kv[int(src[b, d])]) for d in live]  # all loads before any store, as the kernel
            for d, v in zip(live, vals):
                self.kv[int(tgt[b, d])] = v

    def _append(self, target_hidden, cache_loc, positions, cache_loc_2d, commit_lens):
        bs = commit_lens.shape[0]
        width = cache_loc_2d.shape[1]
        self._round["append_width"] = width  # 1: a width-0 round's root rows alone (``append_root``'s eager call)
        rows = target_hidden.view(bs, width, HIDDEN)
        for b in range(bs):
            p = self.seq_lens[b]
            for d in range(int(commit_lens[b])):  # the drafter's context: the accepted path's target rows
                assert int(rows[b, d, 0]) == self.oracle[b][p + d] and int(rows[b, d, 1]) == p + d
                assert int(positions.view(bs, width)[b, d]) == p + d
                assert int(cache_loc_2d[b, d]) == int(self.req_to_token[b, p + d])

    # -- one round --
    def run_round(self):
        from sglang_ddtree.worker.info import make_draft_input

        bs = self.bs
        seq = torch.tensor(self.seq_lens, dtype=torch.int64)
        batch = SimpleNamespace(
            seq_lens=seq, seq_lens_cpu=seq.clone(), seq_lens_sum=int(seq.sum()),
            req_pool_indices=torch.arange(bs, dtype=torch.int64),
            spec_info=make_draft_input(torch.tensor(self.bonus, dtype=torch.int64), seq),
            sampling_info=SimpleNamespace(
                is_all_greedy=self.temperature == 0.0, acc_additive_penalties=None, acc_scaling_penalties=None,
                logit_bias=None, temperatures=torch.full((bs, 1), max(self.temperature, 1e-6)),
                need_top_p_sampling=False, need_top_k_sampling=False),
        )
        self._round = {"moved": False}
        result = self.worker._decode_round(batch, None)
        width = self.config.accept_width
        out = result.next_token_ids.view(bs, width)
        for b in range(bs):
            a = int(result.accept_lens[b])
            new = out[b, :a].tolist()
            p = self.seq_lens[b]
            # the round commits the root (the previous bonus) and the accepted drafts; emits drafts + new bonus
            assert self.bonus[b] == self.oracle[b][p]
            assert new == self.oracle[b][p + 1:p + 1 + a], (b, new)
            budget = self._round.get("budget", self.config.budget)
            if is_chain(budget):  # the chain accepts exactly the leading top-1 drafts the target agrees with
                top1, agree = self._round["top1"][b].tolist(), 0
                while agree < int(budget) and top1[agree] == self.oracle[b][p + 1 + agree]:
                    agree += 1
                assert a == agree + 1, (b, a, agree)
            elif budget == 0:
                assert a == 1
            self.emitted[b] += new
            self.seq_lens[b] = p + a
            self.bonus[b] = int(result.next_draft_input.bonus_tokens[b])
            assert self.bonus[b] == new[-1]
            committed = self.kv[self.req_to_token[b, :p + a].long()].tolist()
            assert committed == self.oracle[b][:p + a], "the committed KV is the target's own sequence"
        assert result.new_seq_lens.tolist() == self.seq_lens
        return self._round


def _counting_heads(harness, w, batch_sizes, mask_capacity):
    """``head_graph.TreeHeads`` as the worker builds it (``_init_heads``), over the harness's stand-ins, without
    graphs (each head runs its calls eagerly over the same static buffers); every use is noted in the round."""
    from sglang_ddtree.worker import fa3_tree, head_graph
    from sglang_ddtree.worker import worker as worker_mod

    class CountingHeads(head_graph.TreeHeads):
        def __call__(self, size, bs, *args):
            harness._round["head"] = size
            return super().__call__(size, bs, *args)

    return head_graph.for_config(
        harness.config, heads_class=CountingHeads, batch_sizes=batch_sizes, device="cpu",
        req_to_token=harness.req_to_token, mask_capacity=mask_capacity,
        slots=worker_mod.assign_extend_cache_locs_func,  # the fixture's stand-in
        bits_for=lambda tree, budget: fa3_tree.round_bits_out(tree, w.model_runner.attn_backend),
        backend_for=w._widths.active if w._widths is not None else None, capture=False)


class _Widths:
    """``widths.VerifyWidths.active`` without the GPU: each bucket's backend, built at top-K 1 where the bucket
    verifies causally (as ``VerifyWidths`` builds it; ``test_chain_bucket`` checks that)."""

    def __init__(self, config, mr):
        self.mr = mr
        self.sets = {b: SimpleNamespace(topk=1 if config.verifies_causally(b) else config.topk, name=str(b))
                     for b in config.buckets}

    @contextlib.contextmanager
    def active(self, budget):
        saved = self.mr.attn_backend
        self.mr.attn_backend = self.sets[budget]
        try:
            yield self.sets[budget]
        finally:
            self.mr.attn_backend = saved


class _ScriptedAuto:
    """``widths.AutoWidth``'s round-facing calls: a scripted choice, forecasts every ``forecast_every``-th drafting
    round, and ``finish`` checked for what it is handed."""

    def __init__(self, harness):
        self.h, self.drafting = harness, 0

    def choose(self, bs):
        b = self.h.script.pop(0)
        self.h._round["budget"] = b
        return b

    def begin(self, bs, budget, stream=None):
        return SimpleNamespace(bs=bs, budget=budget)

    def wants_forecast(self, budget):
        assert budget != 0
        self.drafting += 1
        return bool(self.h.forecast_every) and self.drafting % self.h.forecast_every == 0

    def finish(self, slot, scores, accept_lens, chain_lp, stream=None):
        cfg = self.h.config
        self.h._round["finish"] = (scores is not None, accept_lens is not None, chain_lp is not None)
        if slot.budget == 0:
            assert scores is None and accept_lens is None and chain_lp is None
        else:
            assert accept_lens.shape == (slot.bs,)
        if scores is not None:
            assert scores.shape == (slot.bs, cfg.budget + 1) and (chain_lp is not None) == cfg.chain
            if chain_lp is not None:
                assert chain_lp.shape == (slot.bs, cfg.max_depth)


@pytest.fixture
def cpu_round(monkeypatch):
    from sglang_ddtree.worker import worker as worker_mod

    def assign(req_pool_indices, req_to_token, start_offset, end_offset, batch_size, draft_token_num, device):
        cols = start_offset.view(-1, 1) + torch.arange(draft_token_num, device=start_offset.device)
        return req_to_token[req_pool_indices.view(-1, 1), cols].reshape(-1).to(torch.int64)

    monkeypatch.setattr(worker_mod, "assign_extend_cache_locs_func", assign)
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, stream: None, raising=False)
    from sglang_ddtree.worker import sampling

    for mod in (worker_mod, sampling):
        monkeypatch.setattr(mod, "get_tp_group", lambda: SimpleNamespace(rank_in_group=0, world_size=1))
    return Harness


def _cycle(buckets, rounds, seed):
    """A script over every bucket, with repeats and every width change, the chain and width 0 among them."""
    g = torch.Generator().manual_seed(seed)
    out = list(buckets) + list(reversed(buckets))
    while len(out) < rounds:
        out.append(buckets[int(torch.randint(len(buckets), (1,), generator=g))])
    return out[:rounds]


@pytest.mark.parametrize("seed", range(3))
def test_budget_auto_on_fa3_with_the_chain_is_the_targets_greedy_sequence(cpu_round, seed):
    """fa3 with the chain: width 0 and the chain verify causally (no mask, no bits, no links), trees with bits."""
    config = DDTreeConfig(budget=15, topk=4, block_size=8, adaptive=True, chain=True)
    assert config.buckets == (0, 1, 3, ChainBucket(7), 7, 15)
    h = cpu_round(config, bs=5, seed=seed, fa3_bits=True, script=_cycle(config.buckets, 24, seed), forecast_every=3)
    for _ in range(24):
        budget = h.script[0]
        r = h.run_round()
        shaped = budget == 0 or is_chain(budget)
        assert r["moved"] is (not shaped), r  # a chain's nodes already sit in their final slots
        assert r["mask"] is r["bits"] is (not shaped), r  # a tree round's mask is built (fa3 reads its bits)
        assert r["finish"][1] is (budget != 0)
        # width 0 commits without the launch (``root_commit``) and appends the verify's one row per request
        assert r["append_width"] == (1 if budget == 0 else config.accept_width), r
    assert all(len(e) >= 24 for e in h.emitted)


@pytest.mark.parametrize("seed", range(3))
def test_budget_auto_with_a_mask_is_the_targets_greedy_sequence(cpu_round, seed):
    """Trees only (triton / flashinfer): width 0 is chain-shaped but verifies through its all-True mask."""
    config = DDTreeConfig(budget=15, topk=3, block_size=6, adaptive=True)
    h = cpu_round(config, bs=4, seed=seed, script=_cycle(config.buckets, 20, seed), forecast_every=2)
    for _ in range(20):
        budget = h.script[0]
        r = h.run_round()
        assert r["mask"] is True and r["bits"] is False
        assert r["moved"] is (budget != 0)


def test_width_0_on_fa3_trees_only_keeps_its_bits(cpu_round):
    """fa3 without the chain (``SGLANG_DDTREE_AUTO_CHAIN=0``, or a hybrid target): width 0 is chain-shaped but its
    backend is a tree backend, so it hands over ancestor bits."""
    config = DDTreeConfig(budget=7, topk=2, block_size=5, adaptive=True)
    h = cpu_round(config, bs=3, seed=7, fa3_bits=True, script=[0, 7, 0, 0, 3, 0, 1, 0])
    for _ in range(8):
        budget = h.script[0]
        r = h.run_round()
        assert r["bits"] is True and r["moved"] is (budget != 0)


@pytest.mark.parametrize("budget,topk", [(15, 4), (6, 2)])
def test_a_fixed_budget_is_the_targets_greedy_sequence(cpu_round, budget, topk):
    config = DDTreeConfig(budget=budget, topk=topk, block_size=8)
    h = cpu_round(config, bs=3, seed=budget)
    for _ in range(12):
        r = h.run_round()
        assert r["moved"] and r["mask"]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("bs,sizes", [(5, (2, 8)), (4, (1, 4, 16))])
def test_head_graphs_give_the_targets_greedy_sequence(cpu_round, seed, bs, sizes):
    """The head graphs (``head_graph``, on by default): every tree round takes its slots, tree, topology and bits from
    the head's static buffers, padded to the next size (5 -> 8: rows 5..7 read prefix 0 and request slot 0) or not
    (4 -> 4); width 0 and the chain keep their constant structure."""
    config = DDTreeConfig(budget=15, topk=4, block_size=8, adaptive=True, chain=True)
    h = cpu_round(config, bs=bs, seed=seed, fa3_bits=True, script=_cycle(config.buckets, 24, seed), forecast_every=3,
                  heads=sizes)
    want = next(s for s in sizes if s >= bs)
    for _ in range(24):
        budget = h.script[0]
        r = h.run_round()
        shaped = budget == 0 or is_chain(budget)
        assert r.get("head") == (None if shaped else want), r
        assert r["moved"] is (not shaped) and r["bits"] is (not shaped), r
    assert all(len(e) >= 24 for e in h.emitted)
    assert not bool(h.worker._heads.prefix[bs:].any()) and not bool(h.worker._heads.req_pool_indices[bs:].any())


def test_head_graphs_with_a_fixed_budget_below_the_block(cpu_round):
    """A fixed budget below the block's positions (6 < 7 here; b7 under a 16-token block on a server) reaches fewer
    levels than the draft scores: the head's inputs still take the draft's every position (session 42: sized by the
    budget's depth, the first round's copy failed on an H100)."""
    config = DDTreeConfig(budget=6, topk=2, block_size=8)
    assert config.max_depth == 6 < config.draft_positions == 7
    h = cpu_round(config, bs=3, seed=11, fa3_bits=True, heads=(1, 4))
    for _ in range(12):
        r = h.run_round()
        assert r.get("head") == 4 and r["moved"] and r["bits"], r
    assert all(len(e) >= 12 for e in h.emitted)


def test_head_graphs_step_aside_where_they_do_not_cover_the_round(cpu_round):
    """A batch above the largest head, or a host bound of the prefix lengths' sum above the FULL_MASK buffer's
    capacity (requests sharing a long cached prefix), takes the eager head; the tokens are the same."""
    config = DDTreeConfig(budget=15, topk=4, block_size=8, adaptive=True, chain=True)
    script = [15, 7, 1, 3, 15, 7]
    for heads, capacity in (((1, 2), None), ((4, 8), 10)):
        h = cpu_round(config, bs=4, seed=5, fa3_bits=True, script=list(script), heads=heads, mask_capacity=capacity)
        for _ in script:
            assert "head" not in h.run_round()
    h = cpu_round(config, bs=4, seed=5, fa3_bits=True, script=list(script), heads=(4, 8), mask_capacity=4 * 64)
    assert [h.run_round().get("head") for _ in script] == [4] * len(script)


def test_a_head_writes_what_the_eager_calls_write():
    """One head against the eager calls it captures, on the same inputs (CPU, no graph): slots, every tree field,
    positions, links, the FULL_MASK's head and the ancestor bits; a smaller batch after a larger one reads zeroed
    prefix lengths and request slots in its padded rows."""
    from sglang_ddtree.tree import build_tree
    from sglang_ddtree.worker import head_graph
    from sglang_ddtree.worker.tree_api import verify_topology

    def slots(req_pool_indices, req_to_token, start_offset, end_offset, batch_size, draft_token_num, device):
        cols = start_offset.view(-1, 1) + torch.arange(draft_token_num)
        return req_to_token[req_pool_indices.view(-1, 1), cols].reshape(-1).to(torch.int64)

    g = torch.Generator().manual_seed(0)
    req_to_token = torch.randint(1, 1000, (8, 128), generator=g, dtype=torch.int32)
    heads = head_graph.TreeHeads(batch_sizes=(2, 8), budgets=(7, 15), depth=6, topk=3, device="cpu",
                                 req_to_token=req_to_token, mask_capacity=8 * 100, slots=slots,
                                 bits_for=lambda tree, budget: torch.zeros(tree.batch_size * tree.num_rows, 1,
                                                                           dtype=torch.int32), capture=False)
    for bs, budget in ((7, 15), (2, 7), (5, 7)):
        n = budget + 1
        lp = torch.randn(bs, 6, 3, generator=g).log_softmax(-1).sort(-1, descending=True).values
        ids = torch.randint(50, (bs, 6, 3), generator=g)
        bonus, prefix = torch.randint(50, (bs,), generator=g), torch.randint(1, 90, (bs,), generator=g)
        rpi = torch.randperm(8, generator=g)[:bs]
        size = heads.padded(bs, budget, int(prefix.sum()))
        assert size == (2 if bs <= 2 else 8)
        got = heads(size, bs, budget, lp, ids, bonus, prefix, rpi)
        assert not bool(heads.prefix[bs:].any()) and not bool(heads.req_pool_indices[bs:].any())
        tree = build_tree(lp, ids, budget, bonus)
        bits = torch.zeros(bs * n, 1, dtype=torch.int32)
        mask, positions, r_index, r_next, r_sibling = verify_topology(tree, prefix, int(prefix.sum()), bits_out=bits)
        assert torch.equal(got.verify_loc, slots(rpi, req_to_token, prefix, prefix + n, bs, n, "cpu"))
        for field in ("token_ids", "parents", "depths", "scores", "valid", "num_nodes"):
            assert torch.equal(getattr(got.tree, field), getattr(tree, field)), field
        assert got.tree.max_depth == tree.max_depth
        assert torch.equal(got.mask[:mask.numel()], mask)
        for a, b in ((got.positions, positions), (got.retrieve_index, r_index), (got.retrieve_next_token, r_next),
                     (got.retrieve_next_sibling, r_sibling), (got.tree_bits, bits)):
            assert torch.equal(a, b)
    assert heads.padded(9, 7, 0) is None and heads.padded(2, 3, 0) is None and heads.padded(2, 7, 8 * 100 + 1) is None


def _no_renorm_kernels():
    """``sampling`` imports sgl_kernel's renorm kernels by name (CPU: no sgl_kernel); no request here filters by
    top-p / top-k, so calling one fails."""
    import types

    def unused(*args, **kwargs):
        raise AssertionError("no request filters by top-p / top-k here")

    return types.SimpleNamespace(top_k_renorm_prob=unused, top_p_renorm_prob=unused)


def test_t_above_0_takes_the_same_rounds(cpu_round, monkeypatch):
    """At T > 0 the round draws one token per node (``sampling.node_samples``) and the same walk accepts the draws.
    The stand-in target puts all but ~e^-50 of its mass on one token at every row, so the draws are its greedy
    choices and the output is its greedy sequence through width 0, the chain and trees alike; what this checks is
    the plumbing of the draws into chain-shaped rounds (the distribution tests are the GPU's)."""
    import sys

    monkeypatch.setitem(sys.modules, "sgl_kernel", _no_renorm_kernels())
    config = DDTreeConfig(budget=15, topk=4, block_size=8, adaptive=True, chain=True)
    from sglang_ddtree.worker import sampling

    draws, real = [], sampling.node_samples
    monkeypatch.setattr(sampling, "node_samples", lambda *a: draws.append(1) or real(*a))
    h = cpu_round(config, bs=4, seed=11, fa3_bits=True, script=_cycle(config.buckets, 16, 11), temperature=1.0)
    for _ in range(16):
        h.run_round()
    assert len(draws) == 16


def test_the_chain_inputs_grow_past_the_first_batch(cpu_round):
    """The constants are sized for ``max_running_requests`` (2 here) and grow for a larger batch."""
    config = DDTreeConfig(budget=15, topk=4, block_size=8, adaptive=True, chain=True)
    h = cpu_round(config, bs=7, seed=3, fa3_bits=True, script=[0, ChainBucket(7), 0, ChainBucket(7), 15])
    for _ in range(5):
        h.run_round()
    assert h.worker._chains.capacity >= 7


@pytest.mark.parametrize("heads", [False, True])
@pytest.mark.parametrize("triton_paths", [False, True])
@pytest.mark.parametrize("chain", [True, False])
@pytest.mark.parametrize("greedy", [True, False])
def test_the_round_reads_no_device_value(cpu_round, monkeypatch, chain, greedy, triton_paths, heads):
    """No host sync: the round runs with every device tensor on the ``meta`` device, which holds no values, so any
    read of one on the host (``.item()``, ``.tolist()``, ``int()``, a data-dependent shape, a copy to the CPU)
    raises. Host-side inputs stay on the CPU as they are in serving (``seq_lens_cpu``). Every bucket, the forecast
    on every drafting round, greedy and T > 0. ``triton_paths``: the wrappers take their CUDA paths (``use_triton``
    true) with every Triton launch recorded instead of run, so their host code (allocations, layouts, launch
    arguments) runs as it does on a GPU, the KV mover included; otherwise the tree package's PyTorch paths."""
    import sys

    from triton.runtime.jit import JITFunction

    from sglang_ddtree.tree import _common, accept, build, topology
    from sglang_ddtree.worker import kv_commit, tree_attention

    from sglang_ddtree.worker import worker as worker_mod
    from sglang_ddtree.worker.info import make_draft_input

    meta = torch.device("meta")
    real_module = torch.get_device_module
    monkeypatch.setattr(torch, "get_device_module", lambda d=None: torch.cpu if str(d) == "meta" else real_module(d))
    monkeypatch.setitem(sys.modules, "sgl_kernel", _no_renorm_kernels())  # no request filters by top-p / top-k
    config = DDTreeConfig(budget=15, topk=4, block_size=8, adaptive=True, chain=chain)
    bs, vocab = 3, 40
    w = worker_mod.DDTreeWorker.__new__(worker_mod.DDTreeWorker)
    w.config, w.device, w._hybrid, w._chains = config, meta, False, None
    w._fa3_tree_bits, w._draft_kv_graphs, w._warned_host_sync, w._heads = chain, None, False, None
    mr = SimpleNamespace(attn_backend=SimpleNamespace(topk=config.topk), max_running_requests=2,
                         req_to_token_pool=SimpleNamespace(req_to_token=torch.empty(bs, 64, dtype=torch.int32,
                                                                                    device=meta)))
    w.model_runner, w._target_worker = mr, SimpleNamespace(model_runner=mr)
    moved, launched = [], []
    if triton_paths:
        for mod in (_common, accept, build, topology, tree_attention):
            monkeypatch.setattr(mod, "use_triton", lambda *a, **k: True)
        monkeypatch.setattr(JITFunction, "run", lambda self, *a, grid, warmup, **k: launched.append(
            self.fn.__name__ + (":bits" if k.get("WRITE_BITS") else "")))
        layers = 2
        pool = SimpleNamespace(  # the mover's own path (kv_commit.AcceptedKVMover): two layers' K and V buffers
            device=meta, k_buffer=[torch.empty(64, 8, 128, dtype=torch.bfloat16, device=meta)] * layers,
            v_buffer=[torch.empty(64, 8, 128, dtype=torch.bfloat16, device=meta)] * layers,
            data_ptrs=torch.empty(2 * layers, dtype=torch.uint64, device=meta),
            data_strides=torch.full((2 * layers,), 2048, dtype=torch.int64, device=meta), _kv_copy_config={},
            use_hnd=False, use_native_move_kv_cache=False, k_scale_buffer=None, layer_num=layers)
        mover = kv_commit.AcceptedKVMover(pool)
        assert mover.own
        w._move_kv = lambda c, width: (moved.append(c.kv_tgt.device), mover(c, width))
    else:
        w._move_kv = lambda c, width: moved.append(c.kv_tgt.device)
    w._draft = lambda batch, di, bs, host: (torch.empty(bs, 7, 4, device=meta),
                                            torch.empty(bs, 7, 4, dtype=torch.int64, device=meta))

    def verify(batch, vi, verify_loc, verify_cpu, verify_sum):
        n = vi.draft_token_num
        assert vi.draft_token.device == vi.positions.device == verify_loc.device == meta
        return (SimpleNamespace(next_token_logits=torch.empty(bs * n, vocab, device=meta),
                                hidden_states=torch.empty(bs * n, 3, device=meta)), None, True)

    w._verify = verify
    appended = []
    w._append_target_hidden_to_draft_kv_by_loc = lambda **kw: appended.append(kw["target_hidden"].device)
    finished = []

    class Auto:
        def choose(self, bs):
            return budget

        def begin(self, bs, b, stream=None):
            return SimpleNamespace(bs=bs, budget=b)

        def wants_forecast(self, b):
            return True

        def finish(self, slot, scores, accept_lens, chain_lp, stream=None):
            finished.append(slot.budget)

    w._auto, w._widths = Auto(), _Widths(config, mr)
    if heads:  # the head graphs on fa3 (bits): the heads' static buffers, run eagerly (no graph)
        if not chain:
            pytest.skip("the head graphs apply where fa3's fused tree attention reads bits (here: chain=True)")
        from sglang_ddtree.config import chain_shaped
        from sglang_ddtree.worker import fa3_tree, head_graph

        w._heads = head_graph.TreeHeads(
            batch_sizes=(2, 4), depth=config.max_depth, topk=config.topk, device=meta,
            budgets=[b for b in config.buckets if not chain_shaped(b) and not config.verifies_causally(b)],
            req_to_token=mr.req_to_token_pool.req_to_token, mask_capacity=100,
            slots=worker_mod.assign_extend_cache_locs_func,
            bits_for=lambda tree, b: fa3_tree.round_bits_out(tree, mr.attn_backend), backend_for=w._widths.active,
            capture=False)
        real_call, head_rounds = head_graph.TreeHeads.__call__, []
        monkeypatch.setattr(head_graph.TreeHeads, "__call__",
                            lambda self, size, bs, b, *a: head_rounds.append(b) or real_call(self, size, bs, b, *a))
    for budget in config.buckets:
        seq = torch.empty(bs, dtype=torch.int64, device=meta)
        batch = SimpleNamespace(
            seq_lens=seq, seq_lens_cpu=torch.tensor([10, 11, 12]), seq_lens_sum=33,
            req_pool_indices=torch.empty(bs, dtype=torch.int64, device=meta),
            spec_info=make_draft_input(torch.empty(bs, dtype=torch.int64, device=meta), seq),
            sampling_info=SimpleNamespace(
                is_all_greedy=greedy, acc_additive_penalties=None, acc_scaling_penalties=None, logit_bias=None,
                temperatures=torch.ones(bs, 1, device=meta), need_top_p_sampling=False, need_top_k_sampling=False))
        result = w._decode_round(batch, None)
        assert result.next_token_ids.device == result.accept_lens.device == meta
    assert finished == list(config.buckets) and len(appended) == len(config.buckets)
    assert len(moved) == sum(1 for b in config.buckets if b != 0 and not is_chain(b))
    if heads:  # every tree round took the head
        assert head_rounds == [b for b in config.buckets if b != 0 and not is_chain(b)]
    if triton_paths:  # the CUDA paths ran: builds, topologies, commits, moves (and fa3's bits) were launched
        topologies = [x for x in launched if x.startswith("ddtree_topology_kernel")]
        for name in ("ddtree_build_kernel", "ddtree_accept_commit_kernel", "move_kv_rows_kernel"):
            assert name in launched, (name, sorted(set(launched)))
        # fa3's bits (here with the chain) come from the trees' topology launches; the chain-shaped buckets are
        # causal there, so no round launches the bits on their own
        assert topologies and set(topologies) == {"ddtree_topology_kernel" + (":bits" if chain else "")}
        assert "ancestor_bits_kernel" not in launched and ("draw_rows_kernel" in launched) is (not greedy)
