"""The COMMIT step's target-KV move (``kv_commit.AcceptedKVMover`` on ``worker/kernels/kv_move.py``) leaves
every KV buffer exactly as upstream's sequential move semantics would: natively on CUDA (a ``gpu`` test
there), else on CPU under the Triton interpreter (re-run in a subprocess, like the other kernel tests).

Pools are stand-ins with upstream's ``data_ptrs`` / ``data_strides`` layout (K and V of every layer,
slot-major rows); moves come from real rounds (tree -> greedy ACCEPT + COMMIT), including paths whose
source slots are other entries' targets; a pool upstream would not tile-copy goes to ``move_kv_cache``.
"""

from types import SimpleNamespace

import pytest
import torch

from _interp_rerun import kernel_test_mode

_RUN_HERE, _CUDA, DEV = kernel_test_mode(__file__, "SGLANG_DDTREE_TEST_KV_MOVE_INTERP_CHILD", globals())
if _RUN_HERE:
    from sglang_ddtree.tree import build_tree
    from sglang_ddtree.worker.kv_commit import AcceptedKVMover, greedy_accept_commit
    from sglang_ddtree.worker.tree_api import fill_root

    def _pool(layers, slots, heads, dim, dtype, seed):
        g = torch.Generator().manual_seed(seed)
        k = [torch.randn(slots, heads, dim, generator=g).to(dtype).to(DEV) for _ in range(layers)]
        v = [torch.randn(slots, heads, dim, generator=g).to(dtype).to(DEV) for _ in range(layers)]
        bufs = k + v
        return SimpleNamespace(
            device=DEV, k_buffer=k, v_buffer=v, layer_num=layers, use_hnd=False, use_native_move_kv_cache=False,
            k_scale_buffer=None, _kv_copy_config={"bytes_per_tile": 128},
            data_ptrs=torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64, device=DEV),
            data_strides=torch.tensor([b[0].numel() * b.element_size() for b in bufs], dtype=torch.int64, device=DEV),
            move_kv_cache=lambda tgt, src: pytest.fail("the own kernel applies to this pool"))

    def _round(bs, depth, k, budget, n_slots, seed):
        g = torch.Generator().manual_seed(seed)
        vocab = 5  # the target often agrees with a branch: long paths through the tree
        lp, ids = torch.log_softmax(torch.randn(bs, depth, vocab, generator=g), -1).topk(k, dim=-1)
        tree = build_tree(lp, ids, budget, backend="torch")
        tokens = fill_root(tree, torch.randint(vocab, (bs,), generator=g))
        agree = torch.rand(tokens.shape, generator=g) < 0.85
        target = torch.where(agree, tokens.roll(-1, dims=1), torch.randint(vocab, tokens.shape, generator=g))
        n = budget + 1
        loc = torch.randperm(n_slots - 1, generator=g)[: bs * n].view(bs, n) + 1  # distinct, slot 0 = dummy
        prefix = torch.randint(3, 40, (bs,), generator=g)
        width = min(depth + 1, n)
        c = greedy_accept_commit(tree, tokens, target, loc, prefix, width, backend="torch")
        return c, width

    def _expected(buf, c):
        """Upstream semantics: copy all listed pairs at once (gather, then scatter), (0, 0) pads included."""
        out = buf.clone()
        out[c.kv_tgt.to(buf.device)] = buf[c.kv_src.to(buf.device)]
        return out

    @pytest.mark.parametrize("bs,depth,k,budget,heads,dim,dtype", [
        (3, 7, 3, 15, 2, 64, torch.bfloat16),
        (5, 5, 4, 40, 1, 128, torch.bfloat16),  # 256-byte rows: half a tile
        (2, 6, 2, 8, 3, 96, torch.float32),  # 1152-byte rows: three tiles, the last partial
        (4, 3, 1, 1, 2, 64, torch.float16),  # one node: W = N = 2
    ])
    @pytest.mark.parametrize("seed", range(3))
    def test_moves_match_upstream_semantics(bs, depth, k, budget, heads, dim, dtype, seed):
        n_slots = bs * (budget + 1) + 8
        c, width = _round(bs, depth, k, budget, n_slots, seed)
        c = c._replace(**{f: getattr(c, f).to(DEV) for f in ("kv_tgt", "kv_src", "accept_lens")})
        pool = _pool(2, n_slots, heads, dim, dtype, seed)
        want = [_expected(b, c) for b in pool.k_buffer + pool.v_buffer]
        mover = AcceptedKVMover(pool, backend="triton")
        assert mover.own
        mover(c, width)
        for got, exp in zip(pool.k_buffer + pool.v_buffer, want):
            assert torch.equal(got, exp)
        assert int(c.accept_lens.max()) > 1  # some request moved more than its root

    def test_requests_with_nothing_to_move_leave_the_pool_alone():
        """Request 0 accepted only its root, request 1 a path already in place (source == target), request 2 one
        node that moves, request 3 two nodes of which the first is in place: only request 2's and 3's moved rows
        change, exactly as upstream's copy of the listed pairs."""
        width = 4
        tgt = torch.tensor([[5, 0, 0, 0], [9, 10, 11, 0], [13, 14, 0, 0], [17, 18, 19, 0]], dtype=torch.int64)
        src = torch.tensor([[5, 0, 0, 0], [9, 10, 11, 0], [13, 16, 0, 0], [17, 18, 21, 0]], dtype=torch.int64)
        c = SimpleNamespace(kv_tgt=tgt.reshape(-1).to(DEV), kv_src=src.reshape(-1).to(DEV),
                            accept_lens=torch.tensor([1, 3, 2, 3], dtype=torch.int32, device=DEV))
        pool = _pool(2, 24, 2, 64, torch.bfloat16, 7)
        before = [b.clone() for b in pool.k_buffer + pool.v_buffer]
        want = [_expected(b, c) for b in pool.k_buffer + pool.v_buffer]
        AcceptedKVMover(pool, backend="triton")(c, width)
        for got, exp, old in zip(pool.k_buffer + pool.v_buffer, want, before):
            assert torch.equal(got, exp)
            changed = (got != old).flatten(1).any(dim=1).nonzero().flatten().tolist()
            assert changed == [14, 19], changed

    def test_other_pools_use_upstream_move():
        calls = []
        pool = SimpleNamespace(device=DEV, data_ptrs=None, data_strides=None,
                               move_kv_cache=lambda tgt, src: calls.append((tgt, src)))
        c = SimpleNamespace(kv_tgt=torch.zeros(4, dtype=torch.int64), kv_src=torch.zeros(4, dtype=torch.int64),
                            accept_lens=torch.ones(2, dtype=torch.int32))
        mover = AcceptedKVMover(pool, backend="triton")
        assert not mover.own
        mover(c, 2)
        assert len(calls) == 1
        hnd = _pool(1, 8, 1, 64, torch.bfloat16, 0)
        hnd.use_hnd = True
        assert not AcceptedKVMover(hnd, backend="triton").own
