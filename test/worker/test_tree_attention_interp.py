"""The fa3 verify's fused tree part (``worker/tree_attention.py`` on ``worker/kernels/tree_attention.py``) ==
float64 attention of every tree row over [its request's prefix keys + its ancestors + itself]: natively on
CUDA (a ``gpu`` test there, larger shapes and a CUDA-graph replay), else on CPU under the Triton interpreter
with small shapes (re-run in a subprocess, like the other kernel tests).

The references are the test's own: ancestor sets by walking parents in Python, the full masked attention
and the prefix-only part (o_prefix, lse_prefix; -inf for an empty prefix) computed from the same inputs.
The module's PyTorch fallback is held to the same references.
"""

import itertools

import pytest
import torch

from _interp_rerun import kernel_test_mode

_RUN_HERE, _CUDA, DEV = kernel_test_mode(__file__, "SGLANG_DDTREE_TEST_TREE_ATTN_INTERP_CHILD", globals())
if _RUN_HERE:
    from sglang_ddtree.tree import build_tree
    from sglang_ddtree.worker.tree_attention import MergeLaunch, ancestor_bits, tree_attention_merge

    SENTINEL = 0x5A5A5A5A

    def _random_parents(bs, n, seed, dtype=torch.int64):
        """Parent < child for real rows (row 0 = root); about a fifth of the rows past the root are pads (-1)."""
        g = torch.Generator().manual_seed(seed)
        par = torch.full((bs, n), -1, dtype=torch.int64)
        for b in range(bs):
            for i in range(1, n):
                if torch.rand((), generator=g) < 0.8:
                    par[b, i] = int(torch.randint(0, i, (), generator=g))
        return par.to(dtype)

    def _ancestors(parents, max_depth):
        """[bs, N, N] bool: row i sees j iff j is i or reached in <= max_depth parent hops (Python walk)."""
        bs, n = parents.shape
        seen = torch.zeros((bs, n, n), dtype=torch.bool)
        par = parents.tolist()
        for b in range(bs):
            for i in range(n):
                seen[b, i, i] = True
                cur = i
                for _ in range(max_depth):
                    cur = par[b][cur]
                    if cur < 0:
                        break
                    seen[b, i, cur] = True
        return seen

    def _unpack(words, n):
        """[R, NW] int32 -> [R, 32 * NW] bool, bit j % 32 of word j // 32 (the test's own unpacking)."""
        w = words.cpu().to(torch.int64) & 0xFFFFFFFF
        bits = (w.unsqueeze(-1) >> torch.arange(32)) & 1
        return bits.reshape(words.shape[0], -1) != 0

    def _depth(parents):
        d = 0
        for row in parents.tolist():
            for i in range(len(row)):
                k, cur = 0, i
                while row[cur] >= 0:
                    cur, k = row[cur], k + 1
                d = max(d, k)
        return d

    def _check_bits(parents, max_depth):
        bs, n = parents.shape
        got = ancestor_bits(parents.to(DEV), max_depth, backend="triton")
        assert got.shape == (bs * n, -(-n // 32)) and got.dtype == torch.int32
        flat = _unpack(got, n)
        assert torch.equal(flat[:, :n], _ancestors(parents, max_depth).view(bs * n, n))
        assert not flat[:, n:].any()  # bits past N stay clear
        assert torch.equal(ancestor_bits(parents, max_depth, backend="torch"), got.cpu())

    @pytest.mark.parametrize("n", [1, 2, 16, 17, 33, 64, 65] + ([257, 1025] if _CUDA else []))
    @pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
    def test_ancestor_bits_random_trees(n, dtype):
        parents = _random_parents(3, n, seed=n, dtype=dtype)
        depth = _depth(parents)
        _check_bits(parents, depth)
        _check_bits(parents, depth + 3)  # extra hops end at the root
        if depth > 1:
            _check_bits(parents, depth // 2)  # at most max_depth hops

    @pytest.mark.parametrize("bs,depth,k,budget", [(3, 7, 3, 15), (2, 5, 4, 40), (4, 3, 1, 1), (2, 8, 8, 64)]
                             + ([(8, 16, 8, 512), (2, 16, 8, 1024)] if _CUDA else []))
    def test_ancestor_bits_built_trees(bs, depth, k, budget):
        g = torch.Generator().manual_seed(budget)
        lp, ids = torch.log_softmax(torch.randn(bs, depth, 50, generator=g), -1).topk(k, dim=-1)
        tree = build_tree(lp, ids, budget, backend="torch")
        _check_bits(tree.parents, tree.max_depth)
        got = _unpack(ancestor_bits(tree.parents.to(DEV), tree.max_depth, backend="triton"), budget + 1)
        count = got.sum(-1).view(bs, budget + 1)
        assert torch.equal(count, torch.where(tree.valid, tree.depths + 1, 1))  # root path: depth + 1 rows

    def _problem(bs, n, hq, hkv, d, dtype, seed):
        """Tree q / k / v as views of one fused [T, Hq + 2 Hkv, D] buffer (rows strided), prefixes per request
        (request 0 empty), tree parents; everything rounded to ``dtype`` once."""
        g = torch.Generator().manual_seed(seed)
        t = bs * n
        qkv = torch.randn(t, hq + 2 * hkv, d, generator=g).to(dtype)
        q, k, v = qkv[:, :hq], qkv[:, hq:hq + hkv], qkv[:, hq + hkv:]
        lens = [0] + [int(x) for x in torch.randint(1, 40, (bs - 1,), generator=g)] if bs > 1 else [seed % 2 * 23]
        pk = [torch.randn(p, hkv, d, generator=g).to(dtype) for p in lens]
        pv = [torch.randn(p, hkv, d, generator=g).to(dtype) for p in lens]
        return q, k, v, pk, pv, _random_parents(bs, n, seed)

    def _attend(q, k, v, visible, scale):
        """float64 softmax attention. q [N, Hq, D], k / v [S, Hkv, D], visible [N, S] -> (o [N, Hq, D], lse [N, Hq])."""
        group = q.shape[1] // k.shape[1]
        k = k.double().repeat_interleave(group, dim=1)
        v = v.double().repeat_interleave(group, dim=1)
        s = torch.einsum("nhd,shd->hns", q.double(), k) * scale
        s = s.masked_fill(~visible, float("-inf"))
        lse = torch.logsumexp(s, dim=-1)  # [Hq, N]
        p = torch.where(visible, torch.exp(s - lse.unsqueeze(-1).clamp(min=-1e300)), 0.0)
        return torch.einsum("hns,shd->nhd", p, v), lse.T

    def _references(q, k, v, pk, pv, parents, scale):
        """(full attention [T, Hq, D], o_prefix [T, Hq, D], lse_prefix [T, Hq]) in float64."""
        bs, n = parents.shape
        anc = _ancestors(parents, n)
        full, o_p, lse_p = [], [], []
        for b in range(bs):
            rows = slice(b * n, (b + 1) * n)
            p = pk[b].shape[0]
            o, lse = _attend(q[rows], pk[b], pv[b], torch.ones(n, p, dtype=torch.bool), scale)
            o_p.append(torch.nan_to_num(o))  # empty prefix: o = 0, lse = -inf
            lse_p.append(lse)
            vis = torch.cat([torch.ones(n, p, dtype=torch.bool), anc[b]], dim=1)
            full.append(_attend(q[rows], torch.cat([pk[b], k[rows]]), torch.cat([pv[b], v[rows]]), vis, scale)[0])
        return torch.cat(full), torch.cat(o_p), torch.cat(lse_p)

    HEADS = [(4, 1), (8, 2), (2, 2)]
    MERGE_CASES = [
        (hq, hkv, d, n, dtype) for (hq, hkv), d, n, dtype in itertools.product(
            HEADS + ([(32, 8), (28, 4), (64, 1)] if _CUDA else []), [64, 128],
            [1, 16, 17, 65] + ([257, 513, 1025] if _CUDA else []), [torch.bfloat16, torch.float32])
    ] + [(6, 1, 64, 17, torch.float32), (32, 1, 64, 17, torch.bfloat16),  # G = 6: masked heads; G = 32: 2 groups
         (8, 2, 64, 65, torch.float16), (2, 2, 128, 17, torch.float16)]  # fp16: the low-precision p @ v dot
    if _CUDA:
        MERGE_CASES += [(32, 8, 256, 65, torch.bfloat16), (16, 16, 256, 17, torch.float16)]

    @pytest.mark.parametrize("case", range(len(MERGE_CASES)),
                             ids=[f"h{c[0]}x{c[1]}-d{c[2]}-n{c[3]}-{str(c[4])[6:]}" for c in MERGE_CASES])
    def test_merge_equals_full_attention(case):
        hq, hkv, d, n, dtype = MERGE_CASES[case]
        bs = (1, 3)[case % 2]  # the variants cycle over the cases
        alias = (case // 2) % 2 == 1  # out is o_prefix
        lse_t_hq = (case // 4) % 2 == 1  # lse stored [T, Hq], passed as its .t()
        scale = d ** -0.5
        q, k, v, pk, pv, parents = _problem(bs, n, hq, hkv, d, dtype, seed=case)
        want, o_p64, lse_p64 = _references(q, k, v, pk, pv, parents, scale)
        bits = ancestor_bits(parents.to(DEV), _depth(parents), backend="triton")
        tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
        for backend in ("triton", "torch"):
            o_p = o_p64.to(dtype).to(DEV)
            lse = lse_p64.float().to(DEV)
            lse = lse.contiguous().t() if lse_t_hq else lse.t().contiguous()  # [Hq, T] view either way
            out = o_p if alias else None
            got = tree_attention_merge(q.to(DEV), k.to(DEV), v.to(DEV), bits, o_p, lse, num_rows=n,
                                       sm_scale=scale, out=out, backend=backend)
            assert got.dtype == dtype and got.shape == q.shape
            if alias:
                assert got is o_p
            torch.testing.assert_close(got.cpu().double(), want, **tol, msg=lambda m: f"{backend}: {m}")

    LAUNCHES = [MergeLaunch(block_n=32, rows_per_program=32, max_heads=2, num_warps=2),
                MergeLaunch(block_n=128, rows_per_program=16, max_heads=16, num_warps=1),
                MergeLaunch(block_n=32, rows_per_program=128, max_heads=4, num_warps=8),
                MergeLaunch(block_n=32, rows_per_program=64),  # merge_launch's two choices
                MergeLaunch(block_n=32, rows_per_program=16),
                MergeLaunch()]  # the launch before session 29

    @pytest.mark.parametrize("launch", range(len(LAUNCHES)))
    @pytest.mark.parametrize("n, dtype", [(17, torch.bfloat16), (65, torch.float32)])
    def test_other_launch_configurations_compute_the_same(launch, n, dtype):
        """Tiles and warps other than the verify's (what bench_tree_attention.py times): the same attention, within
        the same tolerance; heads of one KV head split over programs (max_heads 2 < G 4) included."""
        bs, hq, hkv, d = 3, 8, 2, 64
        q, k, v, pk, pv, parents = _problem(bs, n, hq, hkv, d, dtype, seed=11 + launch)
        want, o_p64, lse_p64 = _references(q, k, v, pk, pv, parents, d ** -0.5)
        bits = ancestor_bits(parents.to(DEV), _depth(parents), backend="triton")
        got = tree_attention_merge(q.to(DEV), k.to(DEV), v.to(DEV), bits, o_p64.to(dtype).to(DEV),
                                   lse_p64.float().T.contiguous().to(DEV), num_rows=n, sm_scale=d ** -0.5,
                                   backend="triton", launch=LAUNCHES[launch])
        tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(got.cpu().double(), want, **tol)

    def test_launch_configurations_are_checked():
        for bad in (dict(block_n=48), dict(block_n=16), dict(rows_per_program=8), dict(max_heads=3),
                    dict(rows_per_program=16, max_heads=32), dict(num_warps=3)):
            with pytest.raises(ValueError, match=next(iter(bad))):
                MergeLaunch(**bad)

    @pytest.mark.parametrize("shape", ["chain", "flat"])
    def test_chain_is_causal_and_no_bits_is_self_only(shape):
        """All bits set on a chain (parent i - 1) is causal attention: bits of keys past the row are ignored.
        No bits at all on pads-only parents is each row alone: a row always sees itself."""
        bs, n, hq, hkv, d = 2, 33, 4, 2, 64
        q, k, v, pk, pv, _ = _problem(bs, n, hq, hkv, d, torch.float32, seed=3)
        rows = torch.arange(n).expand(bs, n)
        parents = rows - 1 if shape == "chain" else torch.full((bs, n), -1)
        want, o_p64, lse_p64 = _references(q, k, v, pk, pv, parents, d ** -0.5)
        bits = torch.full((bs * n, 2), -1 if shape == "chain" else 0, dtype=torch.int32, device=DEV)
        for backend in ("triton", "torch"):
            got = tree_attention_merge(q.to(DEV), k.to(DEV), v.to(DEV), bits, o_p64.float().to(DEV),
                                       lse_p64.float().T.contiguous().to(DEV), num_rows=n, sm_scale=d ** -0.5,
                                       backend=backend)
            torch.testing.assert_close(got.cpu().double(), want, atol=1e-4, rtol=1e-4)

    def test_writes_only_the_given_buffers():
        bs, n, max_bs, hq, hkv, d = 2, 17, 3, 4, 2, 64
        parents = _random_parents(bs, n, seed=5).to(DEV)
        nw = -(-n // 32)
        for backend in ("triton", "torch"):
            bits_buf = torch.full((max_bs * n, nw), SENTINEL, dtype=torch.int32, device=DEV)
            bits = ancestor_bits(parents, _depth(parents), out=bits_buf, backend=backend)
            assert bits.data_ptr() == bits_buf.data_ptr() and bits.shape == (bs * n, nw)
            assert (bits_buf[bs * n:] == SENTINEL).all()
            assert torch.equal(bits.cpu(), ancestor_bits(parents.cpu(), n, backend="torch"))

            q, k, v, pk, pv, par = _problem(bs, n, hq, hkv, d, torch.bfloat16, seed=5)
            want, o_p64, lse_p64 = _references(q, k, v, pk, pv, par, d ** -0.5)
            big = torch.full((bs * n + 7, hq + 2, d), 7.0, dtype=torch.bfloat16, device=DEV)
            out = big[:bs * n, 1:hq + 1]  # strided rows and heads inside a larger buffer
            before = big.clone()
            got = tree_attention_merge(q.to(DEV), k.to(DEV), v.to(DEV), bits, o_p64.to(torch.bfloat16).to(DEV),
                                       lse_p64.float().T.contiguous().to(DEV), num_rows=n, sm_scale=d ** -0.5,
                                       out=out, backend=backend)
            assert got is out
            torch.testing.assert_close(got.cpu().double(), want, atol=2e-2, rtol=2e-2)
            touched = torch.zeros(big.shape, dtype=torch.bool)
            touched[:bs * n, 1:hq + 1] = True
            assert torch.equal(big.cpu()[~touched], before.cpu()[~touched])

    def test_rejects_bad_arguments():
        q = torch.zeros(6, 4, 64, device=DEV)
        kv = torch.zeros(6, 2, 64, device=DEV)
        bits = torch.zeros(6, 1, dtype=torch.int32, device=DEV)
        lse = torch.zeros(4, 6, device=DEV)
        ok = dict(num_rows=3, sm_scale=0.125, backend="triton")
        with pytest.raises(ValueError, match="multiple of num_rows"):
            tree_attention_merge(q, kv, kv, bits, q, lse, **dict(ok, num_rows=4))
        with pytest.raises(ValueError, match="lse_prefix"):
            tree_attention_merge(q, kv, kv, bits, q, lse.T.contiguous(), **ok)
        with pytest.raises(ValueError, match="Hkv"):
            tree_attention_merge(q, torch.zeros(6, 3, 64, device=DEV), torch.zeros(6, 3, 64, device=DEV), bits,
                                 q, lse, **ok)
        with pytest.raises(ValueError, match="contiguous last dim"):
            tree_attention_merge(q, kv, kv, bits, q, lse, out=torch.zeros(6, 64, 4, device=DEV).transpose(1, 2),
                                 **ok)

    if _CUDA:
        def test_cuda_graph_replay():
            """Both launches captured in one graph, then replayed on new inputs written into the same buffers."""
            bs, n, hq, hkv, d = 4, 65, 8, 2, 128
            q, k, v, pk, pv, parents = _problem(bs, n, hq, hkv, d, torch.bfloat16, seed=1)
            want, o_p64, lse_p64 = _references(q, k, v, pk, pv, parents, d ** -0.5)
            s_par = torch.full_like(parents, -1).cuda()
            s_q, s_k, s_v = (torch.zeros_like(x).cuda() for x in (q, k, v))
            s_op = torch.zeros(q.shape, dtype=torch.bfloat16, device="cuda")
            s_lse = torch.zeros(hq, bs * n, device="cuda")
            s_bits = torch.zeros(bs * n, 3, dtype=torch.int32, device="cuda")

            def step():
                b = ancestor_bits(s_par, n, out=s_bits)
                tree_attention_merge(s_q, s_k, s_v, b, s_op, s_lse, num_rows=n, sm_scale=d ** -0.5, out=s_op)

            step()  # compile outside the capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            for dst, src in ((s_par, parents), (s_q, q), (s_k, k), (s_v, v), (s_op, o_p64.to(torch.bfloat16)),
                             (s_lse, lse_p64.float().T)):
                dst.copy_(src)
            graph.replay()
            torch.cuda.synchronize()
            torch.testing.assert_close(s_op.cpu().double(), want, atol=2e-2, rtol=2e-2)
