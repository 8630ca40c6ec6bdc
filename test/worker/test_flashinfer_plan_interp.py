"""DDTREE's host-sync-free flashinfer plan (``worker/flashinfer_plan.py``), its parts that run anywhere: the tree
mask packed on the device == FlashInfer's ``segment_packbits(..., bitorder="little")`` layout, computed here
bit by bit in Python (natively on CUDA, else under the Triton interpreter in a child process), and the host
layout's bounds. The attention it plans is checked against upstream's plan on the GPU
(``test_flashinfer_plan_gpu.py``).
"""

import types

import pytest
import torch

from _interp_rerun import kernel_test_mode

_RUN_HERE, _CUDA, DEV = kernel_test_mode(__file__, "SGLANG_DDTREE_TEST_FI_PLAN_INTERP_CHILD", globals())
if _RUN_HERE:
    from sglang_ddtree.worker.flashinfer_plan import host_layout, pack_tree_mask, pack_tree_mask_torch

    SENTINEL = 0xA5

    def _python_pack(mask, q_lens, kv_lens):
        """(bytes, byte offsets): each request's q x kv block, row-major, 8 bits a byte, bit k = element 8j+k."""
        flat, out, offsets, pos = [bool(v) for v in mask.reshape(-1).tolist()], [], [0], 0
        for q, kv in zip(q_lens, kv_lens):
            seg = flat[pos:pos + q * kv]
            pos += q * kv
            for j in range(0, len(seg), 8):
                out.append(sum(1 << k for k, v in enumerate(seg[j:j + 8]) if v))
            offsets.append(len(out))
        return out, offsets

    def _case(q_lens, kv_lens, seed, pad_bits=37):
        g = torch.Generator().manual_seed(seed)
        total = sum(q * kv for q, kv in zip(q_lens, kv_lens))
        mask = torch.rand(total + pad_bits, generator=g) < 0.5  # bits past the last block: never read
        qo = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
        kv = torch.tensor([0] + torch.tensor(kv_lens).cumsum(0).tolist(), dtype=torch.int32)
        return mask, qo, kv

    CASES = [
        ([16], [16]),  # one request, whole bytes
        ([16, 16, 16], [21, 16, 140]),  # odd key counts: a request's bytes end mid-byte
        ([1, 1], [1, 7]),  # fewer bits than a byte
        ([65, 65, 65, 65], [300, 65, 66, 129]),  # budget 64 rows, several programs per request
        ([17] * 9, [17 + 3 * i for i in range(9)]),
    ]

    @pytest.mark.parametrize("backend", ["triton", "torch"])
    @pytest.mark.parametrize("q_lens,kv_lens", CASES)
    def test_pack_tree_mask_matches_segment_packbits_layout(q_lens, kv_lens, backend):
        mask, qo, kv = _case(q_lens, kv_lens, seed=sum(kv_lens))
        want, want_off = _python_pack(mask, q_lens, kv_lens)
        out = torch.full((len(want) + 50,), SENTINEL, dtype=torch.uint8, device=DEV)
        out_indptr = torch.full((len(q_lens) + 1,), -1, dtype=torch.int32, device=DEV)
        bound = max((q * k + 7) // 8 for q, k in zip(q_lens, kv_lens))
        pack_tree_mask(mask.to(DEV), qo.to(DEV), kv.to(DEV), out, out_indptr, bound, backend=backend)
        assert out_indptr.cpu().tolist() == want_off
        assert out[:len(want)].cpu().tolist() == want
        assert (out[len(want):].cpu() == SENTINEL).all(), "wrote past the packed mask"

    def test_pack_tree_mask_upper_bound_grid_and_uint8_mask():
        """A grid sized by a generous host bound writes the same bytes; a uint8 0 / 1 mask packs as the bool one."""
        q_lens, kv_lens = [16, 16], [40, 23]
        mask, qo, kv = _case(q_lens, kv_lens, seed=3)
        want, want_off = _python_pack(mask, q_lens, kv_lens)
        for m in (mask, mask.to(torch.uint8)):
            out = torch.full((len(want) + 8,), SENTINEL, dtype=torch.uint8, device=DEV)
            out_indptr = torch.zeros(3, dtype=torch.int32, device=DEV)
            pack_tree_mask(m.to(DEV), qo.to(DEV), kv.to(DEV), out, out_indptr, 10 * len(want), backend="triton")
            assert out_indptr.cpu().tolist() == want_off and out[:len(want)].cpu().tolist() == want
            assert (out[len(want):].cpu() == SENTINEL).all()

    def test_torch_reference_is_the_python_layout():
        q_lens, kv_lens = [3, 5], [9, 2]
        mask, qo, kv = _case(q_lens, kv_lens, seed=9)
        want, want_off = _python_pack(mask, q_lens, kv_lens)
        out, out_indptr = torch.zeros(len(want), dtype=torch.uint8), torch.zeros(3, dtype=torch.int32)
        pack_tree_mask_torch(mask, qo, kv, out, out_indptr)
        assert out.tolist() == want and out_indptr.tolist() == want_off

    def test_host_layout_bounds_every_device_length():
        """Real rows: host lengths already bound prefix + N (the worker's seq_lens_cpu); pad rows: the fill value,
        whose device key count is fill + N. Every planned key count bounds the device's, the packed-mask bound
        bounds the device's packed bytes, qo is N per request."""
        n = 16
        device_prefix = torch.tensor([100, 7, 0])  # committed lengths on the device
        host = torch.tensor([100 + n + 3, 7 + n, 1])  # lagging bound (+3), exact, a pad row (fill value 1)
        device_kv = torch.tensor([100 + n, 7 + n, 1 + n])
        qo, kv, kv_lens, packed, max_bytes = host_layout(host, n)
        assert qo.tolist() == [0, 16, 32, 48] and qo.dtype == kv.dtype == kv_lens.dtype == torch.int32
        assert (kv_lens.to(torch.int64) >= device_kv).all() and kv[1:].tolist() == kv_lens.cumsum(0).tolist()
        device_bytes = (device_kv * n + 7) // 8
        assert packed >= int(device_bytes.sum()) and max_bytes >= int(device_bytes.max())
        assert device_prefix.numel() == kv_lens.numel()
        # a committed length that lags by more than N (W = 20 > N = 16): the margin is W, N alone would not bound it
        lagging, device = torch.tensor([81 + n]), torch.tensor([100 + n])
        assert int(host_layout(lagging, n, lag=20)[2][0]) >= int(device[0]) > int(host_layout(lagging, n)[2][0])
        with pytest.raises(ValueError, match="rows_per_req"):
            host_layout(host, 0)
        if _CUDA:
            with pytest.raises(ValueError, match="CPU"):
                host_layout(host.cuda(), n)

    # ---- the split-KV work list rewritten from the device key counts (rewrite_split_layout) --------------------
    from sglang_ddtree.worker.flashinfer_plan import (PLAN_INFO_FIELDS, rewrite_split_layout,
                                                      rewrite_split_layout_torch, split_layout)

    def _flashinfer_layout(kv_lens, rows, q_tiles, chunk, padded):
        """FlashInfer 0.6.14's ``PrefillSplitQOKVIndptr`` (scheduler.cuh), ported: (request, qo tile, kv tile, valid
        [padded]; o_indptr [bs + 1]; merge_indptr [bs * rows + 1]) for these key counts and chunk size."""
        req, qt, kt, o, merge = [], [], [], [0], [0]
        for b, kv in enumerate(kv_lens):
            chunks = -(-max(kv, 1) // chunk)
            for q in range(q_tiles):
                for k in range(chunks):
                    req.append(b), qt.append(q), kt.append(k)
            base = merge[-1]
            merge.extend(base + chunks * (r + 1) for r in range(rows))
            o.append(o[-1] + rows * chunks)
        valid = [1] * len(req) + [0] * (padded - len(req))
        return req, qt, kt, valid, o, merge

    # (device key counts, host bounds, rows, q_tiles, chunk, padded): the bound spans one chunk more for some
    # requests (142 vs 116 keys, chunks of 128), several query tiles (a budget-64 verify, GQA 4, tiles of 64: 5),
    # a graph pad row (fill 1 + N), one request
    LAYOUT_CASES = [
        ([316, 33, 80, 116, 17], [322, 49, 98, 142, 17], 16, 1, 128, 33),
        ([200, 129, 65 + 1], [281, 210, 65 + 65 + 1], 65, 5, 128, 60),
        ([127], [129], 16, 2, 128, 8),
        ([1, 300], [17, 400], 16, 1, 64, 40),
    ]

    def _workspace(info_fields, bs, rows):
        """A CPU int workspace (filled with a sentinel) and the layout's views at the plan info's offsets."""
        ws = torch.full((4096,), 0x5A, dtype=torch.uint8)
        lay = split_layout(types.SimpleNamespace(_int_workspace_buffer=ws), info_fields, bs, rows, 1)
        assert lay is not None
        return ws, lay

    def _info(padded, total_rows, cta_tile_q, graph=1, split=1):
        # the offsets FlashInfer's AlignedAllocator hands out, in its order (16-byte aligned)
        def align(x):
            return -(-x // 16) * 16

        off, fields = 0, {}
        for name, size in (("request", 4 * padded), ("qo", 4 * padded), ("kv", 4 * padded), ("o", 4 * 65),
                           ("chunk", 4), ("rows", 4), ("merge", 4 * (total_rows + 1)), ("valid", padded)):
            fields[name], off = off, align(off + size)
        return [padded, total_rows, fields["rows"], cta_tile_q, fields["request"], fields["qo"], fields["kv"],
                fields["merge"], fields["o"], fields["chunk"], 0, 0, fields["valid"], graph, split]

    @pytest.mark.parametrize("backend", ["triton", "torch"])
    @pytest.mark.parametrize("dev_kv,host_kv,rows,q_tiles,chunk,padded", LAYOUT_CASES)
    def test_rewrite_gives_flashinfers_layout_for_the_device_key_counts(dev_kv, host_kv, rows, q_tiles, chunk,
                                                                        padded, backend):
        """Start from FlashInfer's layout for the host bounds (what the sync-free plan's schedule copies in); after
        the rewrite the workspace holds FlashInfer's layout for the device's key counts, entry for entry."""
        bs = len(dev_kv)
        info = _info(padded, bs * rows + 7, cta_tile_q=-(-rows // q_tiles))  # GQA 1 here: rows / tile = q_tiles
        ws, lay = _workspace(info, bs, rows)
        assert lay.q_tiles == q_tiles
        req, qt, kt, valid, o, merge = _flashinfer_layout(host_kv, rows, q_tiles, chunk, padded)
        for t, v in ((lay.request, req), (lay.qo_tile, qt), (lay.kv_tile, kt)):
            t[:len(v)] = torch.tensor(v, dtype=torch.int32)
        lay.valid[:] = torch.tensor(valid, dtype=torch.uint8)
        lay.o_indptr[:] = torch.tensor(o, dtype=torch.int32)
        lay.merge_indptr[:] = torch.tensor(merge, dtype=torch.int32)
        lay.chunk[0] = chunk
        want = _flashinfer_layout(dev_kv, rows, q_tiles, chunk, padded)
        host_chunks = [-(-k // chunk) for k in host_kv]
        assert host_chunks != [-(-k // chunk) for k in dev_kv], "the case must make the chunk counts differ"
        assert (req, merge) != (want[0], want[5])
        ws_dev = ws.to(DEV)
        lay_dev = split_layout(types.SimpleNamespace(_int_workspace_buffer=ws_dev), info, bs, rows, 1)
        kv_indptr = torch.tensor([0] + torch.tensor(dev_kv).cumsum(0).tolist(), dtype=torch.int32, device=DEV)
        rewrite_split_layout(kv_indptr, lay_dev, backend=backend)
        n_work = len(want[0])
        assert lay_dev.request[:n_work].cpu().tolist() == want[0]
        assert lay_dev.qo_tile[:n_work].cpu().tolist() == want[1]
        assert lay_dev.kv_tile[:n_work].cpu().tolist() == want[2]
        assert lay_dev.valid.cpu().tolist() == want[3]
        assert lay_dev.o_indptr.cpu().tolist() == want[4]
        assert lay_dev.merge_indptr.cpu().tolist() == want[5]
        assert int(lay_dev.chunk[0]) == chunk, "the plan's chunk size is kept"

    def test_rewrite_writes_only_the_layout():
        """Bytes of the workspace outside the layout's arrays (the plan's other fields) are left as they were."""
        dev_kv, rows, padded = [116, 17], 16, 12
        info = _info(padded, 40, cta_tile_q=64)
        ws = torch.full((4096,), 0x5A, dtype=torch.uint8, device=DEV)
        lay = split_layout(types.SimpleNamespace(_int_workspace_buffer=ws), info, 2, rows, 1)
        lay.chunk[0] = 128
        before = ws.clone()
        kv_indptr = torch.tensor([0, 116, 133], dtype=torch.int32, device=DEV)
        rewrite_split_layout(kv_indptr, lay, backend="triton")
        touched = torch.zeros(4096, dtype=torch.bool, device=DEV)
        for t, count in ((lay.request, 2), (lay.qo_tile, 2), (lay.kv_tile, 2), (lay.o_indptr, 3),
                         (lay.merge_indptr, 2 * rows + 1)):
            start = t.data_ptr() - ws.data_ptr()
            touched[start:start + 4 * count] = True
        start = lay.valid.data_ptr() - ws.data_ptr()
        touched[start:start + padded] = True
        assert torch.equal(ws[~touched], before[~touched])

    def test_split_layout_reads_only_a_graph_split_kv_plan():
        ws = types.SimpleNamespace(_int_workspace_buffer=torch.zeros(4096, dtype=torch.uint8))
        info = _info(16, 40, cta_tile_q=64)
        lay = split_layout(ws, info, 2, 16, 4)
        assert lay is not None and lay.q_tiles == 1 and lay.rows == 16  # 16 rows x GQA 4 = 64: one tile
        assert lay.request.numel() == lay.valid.numel() == 16 and lay.merge_indptr.numel() == 33
        assert split_layout(types.SimpleNamespace(_int_workspace_buffer=torch.zeros(4096, dtype=torch.uint8)),
                            _info(16, 200, cta_tile_q=64), 2, 65, 4).q_tiles == 5
        assert len(info) == PLAN_INFO_FIELDS
        for bad in (info[:-1], _info(16, 40, 64, graph=0), _info(16, 40, 64, split=0), _info(16, 40, 0), object()):
            fresh = types.SimpleNamespace(_int_workspace_buffer=torch.zeros(4096, dtype=torch.uint8))
            assert split_layout(fresh, bad, 2, 16, 4) is None
        fresh = types.SimpleNamespace(_int_workspace_buffer=torch.zeros(4096, dtype=torch.uint8))
        assert split_layout(fresh, info, 3, 16, 4) is None, "more rows than the plan's capacity (40)"
        odd = list(info)
        odd[4] += 2  # request indices at an offset an int32 view cannot start at
        assert split_layout(fresh, odd, 2, 16, 4) is None
        far = list(info)
        far[7] = 4096 - 8  # merge_indptr past the workspace's end
        assert split_layout(fresh, far, 2, 16, 4) is None

    def test_torch_reference_is_flashinfers_layout():
        info = _info(10, 20, cta_tile_q=64)
        ws = types.SimpleNamespace(_int_workspace_buffer=torch.zeros(4096, dtype=torch.uint8))
        lay = split_layout(ws, info, 2, 8, 1)
        lay.chunk[0] = 64
        rewrite_split_layout_torch(torch.tensor([0, 100, 101], dtype=torch.int32), lay)
        want = _flashinfer_layout([100, 1], 8, 1, 64, 10)
        assert lay.request[:3].tolist() == want[0] and lay.kv_tile[:3].tolist() == want[2]
        assert lay.valid.tolist() == want[3] and lay.merge_indptr.tolist() == want[5]
