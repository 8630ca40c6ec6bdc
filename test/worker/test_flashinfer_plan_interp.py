"""DDTREE's host-sync-free flashinfer plan (``worker/flashinfer_plan.py``), its parts that run anywhere: the tree
mask packed on the device == FlashInfer's ``segment_packbits(..., bitorder="little")`` layout, computed here
bit by bit in Python (natively on CUDA, else under the Triton interpreter in a child process), and the host
layout's bounds. The attention it plans is checked against upstream's plan on the GPU
(``test_flashinfer_plan_gpu.py``).
"""

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
