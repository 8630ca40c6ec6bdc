"""The draft head's fused top-K + logsumexp (``draft_head.topk_lse`` on ``worker/kernels/topk_lse.py``) ==
PyTorch's topk / logsumexp of the float32 logits: natively on CUDA (a ``gpu`` test there, the real block
and a Qwen3-sized vocabulary), else on CPU under the Triton interpreter with a small block (re-run in a
subprocess, like the other kernel tests). Ties (bf16 logits repeat values) go to the lower token id.
"""

import pytest
import torch

from _interp_rerun import kernel_test_mode

_RUN_HERE, _CUDA, DEV = kernel_test_mode(__file__, "SGLANG_DDTREE_TEST_TOPK_LSE_INTERP_CHILD", globals())
if _RUN_HERE:
    from sglang_ddtree.worker.draft_head import topk_lse

    # (rows, V, K, block); the wide blocks (16384 on CUDA, one slice wider than the row here) are the launch
    # configurations benchmark/bench_topk_lse.py compares
    CASES = ([(5, 151936, 8, 4096), (40, 5000, 4, 4096), (3, 4096, 1, 4096), (5, 151936, 8, 16384)] if _CUDA else
             [(3, 300, 4, 64), (2, 64, 8, 64), (4, 130, 1, 32), (2, 37, 8, 16), (3, 300, 4, 512)])

    def _logits(rows, vocab, seed, ties):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(rows, vocab, generator=g) * 4
        if ties:  # few distinct values: many equal logits at the top
            x = (x * 2).round() / 2
        return x.to(torch.bfloat16)

    def _reference(logits, k):
        """float32 top-K, equal values ordered by column (a stable descending sort), and logsumexp."""
        wide = logits.float()
        order = torch.sort(-wide, dim=-1, stable=True).indices[:, :k]
        return wide.gather(1, order), order, torch.logsumexp(wide, dim=-1)

    @pytest.mark.parametrize("rows,vocab,k,block", CASES)
    @pytest.mark.parametrize("ties", [False, True])
    @pytest.mark.parametrize("select", ["all", "threshold"])
    def test_matches_torch(rows, vocab, k, block, ties, select):
        """``threshold`` skips slices whose max is below the K-th largest slice max: with ties many slice maxima
        are equal (all of them qualify), and with fewer slices than K (37 columns in blocks of 16) every slice."""
        logits = _logits(rows, vocab, seed=vocab + k, ties=ties).to(DEV)
        if ties:  # row 0 <= 0, its top values zeros of both signs (-0.0 and +0.0 are equal logits: lower id first)
            logits[0] = -logits[0].abs()
            logits[0, ::5] = 0.0
        val = torch.empty((rows, k), dtype=torch.float32, device=DEV)
        ids = torch.empty((rows, k), dtype=torch.int64, device=DEV)
        lse = torch.empty((rows,), dtype=torch.float32, device=DEV)
        topk_lse(logits, k, val, ids, lse, backend="triton", block=block, select=select)
        want_val, want_ids, want_lse = _reference(logits.cpu(), k)
        assert torch.equal(val.cpu(), want_val)
        assert torch.equal(ids.cpu(), want_ids)
        assert torch.allclose(lse.cpu(), want_lse, rtol=0, atol=2e-5 * max(1.0, float(want_lse.abs().max())))

    @pytest.mark.parametrize("select", ["threshold", "all"])
    def test_the_draft_heads_launch_computes_torchs_result(monkeypatch, select):
        """The draft head's launch (``draft_head.head_launch``: the threshold pass in slices of 2048 columns, 4
        warps, or every slice's at 4096 x 8): the kernels named ran, and the result is PyTorch's either way (ties
        included: the lower id first)."""
        from sglang_ddtree.worker import draft_head
        from sglang_ddtree.worker.kernels import topk_lse as kernels

        launched = []

        class Spy:
            def __init__(self, name, kernel):
                self.name, self.kernel = name, kernel

            def __getitem__(self, grid):
                launched.append(self.name)
                return self.kernel[grid]

        for name in ("topk_lse_slices_kernel", "topk_lse_select_kernel"):
            monkeypatch.setattr(kernels, name, Spy(name, getattr(kernels, name)))
        rows, vocab, k = 3, 9000, 8  # 5 slices of 2048 (the last partial), 3 of 4096
        logits = _logits(rows, vocab, seed=11, ties=True).to(DEV)
        val = torch.empty((rows, k), dtype=torch.float32, device=DEV)
        ids = torch.empty((rows, k), dtype=torch.int64, device=DEV)
        lse = torch.empty((rows,), dtype=torch.float32, device=DEV)
        topk_lse(logits, k, val, ids, lse, backend="triton", **draft_head.head_launch(select))
        assert launched == ["topk_lse_select_kernel" if select == "threshold" else "topk_lse_slices_kernel"]
        want_val, want_ids, want_lse = _reference(logits.cpu(), k)
        assert torch.equal(val.cpu(), want_val) and torch.equal(ids.cpu(), want_ids)
        assert torch.allclose(lse.cpu(), want_lse, rtol=0, atol=2e-5 * max(1.0, float(want_lse.abs().max())))

    def test_strided_outputs_and_empty():
        logits = _logits(4, 100, seed=1, ties=False).to(DEV)
        val = torch.empty((4, 6), dtype=torch.float32, device=DEV)[:, :3]  # not contiguous
        ids = torch.empty((4, 3), dtype=torch.int64, device=DEV)
        lse = torch.empty((4,), dtype=torch.float32, device=DEV)
        topk_lse(logits, 3, val, ids, lse, backend="triton", block=64 if not _CUDA else 4096)
        want_val, want_ids, _ = _reference(logits.cpu(), 3)
        assert torch.equal(val.cpu(), want_val) and torch.equal(ids.cpu(), want_ids)
        topk_lse(logits[:0], 3, val[:0], ids[:0], lse[:0], backend="triton")

    def test_threshold_select_skips_the_slices_below_the_kth_slice_max():
        """The top-K of a row whose large values sit in two slices comes from those two alone: the other
        slices' candidates are -inf (a slice that took its top-K would hold finite values)."""
        from sglang_ddtree.worker.kernels.topk_lse import (topk_lse_select_kernel, topk_lse_stats_kernel,
                                                           topk_lse_threshold_kernel)

        block, k = 16, 2
        logits = _logits(1, 128, seed=3, ties=False).to(DEV)
        logits[0, 20] = logits[0, 100] = 50.0  # slices 1 and 6
        s_max = torch.empty((1, 8), dtype=torch.float32, device=DEV)
        s_sum = torch.empty_like(s_max)
        thresh = torch.empty((1,), dtype=torch.float32, device=DEV)
        s_val = torch.empty((1, 8, k), dtype=torch.float32, device=DEV)
        s_idx = torch.empty((1, 8, k), dtype=torch.int64, device=DEV)
        topk_lse_stats_kernel[(1, 8)](logits, logits.stride(0), 128, s_max, s_sum, 8, BLOCK=block)
        topk_lse_threshold_kernel[(1,)](s_max, thresh, 8, K=k, BLOCK_S=8)
        topk_lse_select_kernel[(1, 8)](logits, logits.stride(0), 128, s_max, thresh, s_val, s_idx, 8, K=k,
                                       BLOCK=block)
        assert float(thresh[0]) == 50.0
        finite = torch.isfinite(s_val[0]).any(dim=1).cpu().tolist()
        assert finite == [s in (1, 6) for s in range(8)], finite
        assert s_idx[0, 1, 0].item() == 20 and s_idx[0, 6, 0].item() == 100
