"""CPU: the decode round's host-side lengths (``DDTreeWorker._host_seq_lens``, computed once per round):
bounds for the draft (extra = L) and verify (extra = N) forwards and the FULL_MASK sum bound, from each of
the three host sources, without touching the device lengths unless no host source exists."""

from types import SimpleNamespace

import torch

from sglang_ddtree.compat import adapter
from sglang_ddtree.config import DDTreeConfig
from sglang_ddtree.worker.worker import DDTreeWorker


def _worker(budget=64, block=16):
    w = DDTreeWorker.__new__(DDTreeWorker)  # only the host-length helper is exercised
    w.config, w._warned_host_sync = DDTreeConfig(budget=budget, topk=min(8, budget), block_size=block), False
    return w


def _draft_input(reserved=None):
    """A draft input carrying the host reserved lengths under the installed release's names (``adapter()``:
    ``reserved_seq_lens_cpu`` up to 0.5.18, ``nxt_kv_lens_cpu`` from 0.5.19), or none yet."""
    d = SimpleNamespace()
    adapter().record_reserved_lens(d, reserved, None if reserved is None else int(reserved.sum()))
    return d


class _NoSync:
    """Device lengths that fail the test if the helper reads them."""

    def __len__(self):
        return 3

    def to(self, *args, **kwargs):
        raise AssertionError("read the device lengths although a host source exists")


def test_published_lengths_plus_extra():
    w = _worker()
    batch = SimpleNamespace(seq_lens=_NoSync(), seq_lens_cpu=torch.tensor([5, 9, 2], dtype=torch.int32))
    host = w._host_seq_lens(batch, _draft_input())
    for extra in (16, 65):
        bound, total = host.plus(extra)
        assert bound.dtype == torch.int64 and bound.tolist() == [5 + extra, 9 + extra, 2 + extra]
        assert total == 16 + 3 * extra
    assert host.mask_sum_bound == 16 + 3 * w.config.accept_width  # lag of one round's commit


def test_reserved_lengths_are_already_a_bound():
    w = _worker()
    batch = SimpleNamespace(seq_lens=_NoSync(), seq_lens_cpu=None)
    host = w._host_seq_lens(batch, _draft_input(torch.tensor([100, 120, 90])))
    for extra in (16, 65):
        bound, total = host.plus(extra)
        assert bound.tolist() == [100, 120, 90] and total == 310
    assert host.mask_sum_bound == 310


def test_device_lengths_as_last_resort():
    w = _worker(budget=7, block=16)  # W = 8
    batch = SimpleNamespace(seq_lens=torch.tensor([4, 6]), seq_lens_cpu=None)
    host = w._host_seq_lens(batch, _draft_input())
    bound, total = host.plus(8)
    assert bound.tolist() == [12, 14] and total == 26 and host.mask_sum_bound == 10 + 2 * 8
    assert w._warned_host_sync
