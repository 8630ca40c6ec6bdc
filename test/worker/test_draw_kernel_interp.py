"""The T > 0 per-node draw (``worker.sampling.draw_rows`` on ``worker/kernels/draw.py``) draws each row from
its own distribution: natively on CUDA machines (a ``gpu`` test there), else on CPU under the Triton
interpreter (re-run in a subprocess, like ``test_commit_kernel_interp.py``).

Goodness of fit against the exact row distributions (chi-square, p > 1e-4 per row); rows with zero-mass
tokens never draw them; rows spanning several kernel blocks and unnormalised rows
(float32 sums off 1) included; a control with the rows shuffled must fail the same test.
"""

import os
import sys

import pytest
import torch

from _interp_rerun import kernel_test_mode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _sampling_stats as st  # noqa: E402

_RUN_HERE, _CUDA, DEV = kernel_test_mode(__file__, "SGLANG_DDTREE_TEST_DRAW_INTERP_CHILD", globals())
if _RUN_HERE:
    from sglang_ddtree.worker import sampling

    P_MIN = 1e-4

    def _rows(vocab: int, seed: int) -> torch.Tensor:
        """Four distributions over ``vocab``: peaked, flat over a few tokens with zeros between (mass in two
        different kernel blocks when vocab > block), a near-one-hot row, and an unnormalised row."""
        g = torch.Generator().manual_seed(seed)
        peaked = torch.softmax(torch.randn(vocab, generator=g) * 3, -1)
        sparse = torch.zeros(vocab)
        picks = torch.tensor(sorted({1, 2, vocab // 2, vocab - 1}))
        weights = torch.arange(1, len(picks) + 1, dtype=torch.float32)
        sparse[picks] = weights / weights.sum()
        onehot = torch.full((vocab,), 1e-7)
        onehot[3] = 1.0
        onehot /= onehot.sum()
        unnorm = torch.rand(vocab, generator=g) * (torch.rand(vocab, generator=g) < 0.3)
        unnorm[0] = 0.5
        return torch.stack([peaked, sparse, onehot, unnorm * 1.7])

    def _draws(probs: torch.Tensor, reps: int) -> torch.Tensor:
        """[reps, R] draws of every row (all rows of one call at once, as the round draws them)."""
        big = probs.repeat(reps, 1).to(DEV)
        return sampling.draw_rows(big, backend="triton").view(reps, probs.shape[0]).cpu()

    # On CUDA the kernel's own block (4096): 5000 and 151936 (Qwen3's vocabulary) cross blocks. The interpreter
    # runs programs one by one, so on CPU a 64-wide block over 300 columns crosses five blocks, with few draws.
    VOCABS = [7, 300, 5000, 151936] if _CUDA else [7, 300]

    @pytest.mark.parametrize("vocab", VOCABS)
    def test_draws_follow_each_row(vocab, monkeypatch):
        if not _CUDA:
            monkeypatch.setattr(sampling, "_DRAW_BLOCK", 64)
        probs = _rows(vocab, seed=vocab)
        reps = 4000 if _CUDA else 150
        draws = _draws(probs, reps)
        assert draws.dtype == torch.int64 and int(draws.min()) >= 0 and int(draws.max()) < vocab
        for r in range(probs.shape[0]):
            col = draws[:, r]
            assert bool((probs[r][col] > 0).all()), f"row {r} drew a zero-mass token"
            want = probs[r].double() / probs[r].double().sum()
            res = st.chi2_goodness_of_fit(col.tolist(), st.as_dict(want, floor=1e-12))
            assert res.p > P_MIN, (vocab, r, res)
        # control: the same test against the wrong row's distribution fails
        wrong = probs[1].double() / probs[1].double().sum()
        res = st.chi2_goodness_of_fit(draws[:, 0].tolist(), st.as_dict(wrong, floor=1e-12))
        assert res.p < P_MIN

    def test_empty_and_single_column():
        assert sampling.draw_rows(torch.zeros((0, 5), device=DEV), backend="triton").shape == (0,)
        ones = torch.ones((3, 1), device=DEV)
        assert sampling.draw_rows(ones, backend="triton").tolist() == [0, 0, 0]
