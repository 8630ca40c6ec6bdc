"""Top-K draft log-probs: against a dense log_softmax, chunking, and the vocab-parallel merge."""

import pytest
import torch

from sglang_ddtree.worker import draft_head as dh


def _dense(hidden, weight, k):
    lp = torch.log_softmax((hidden @ weight.T).float(), -1)
    return lp.topk(k, dim=-1)


def test_local_topk_matches_dense_log_softmax(monkeypatch):
    monkeypatch.setattr(dh, "_CHUNK_TOKENS", 5)  # force several chunks
    g = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(13, 16, generator=g), torch.randn(40, 16, generator=g)
    val, ids, lse = dh.topk_logprobs_local(hidden, weight, 4, vocab_start=0)
    ref_lp, ref_ids = _dense(hidden, weight, 4)
    torch.testing.assert_close(val - lse.unsqueeze(1), ref_lp, atol=1e-5, rtol=1e-5)
    assert torch.equal(ids, ref_ids)


def test_vocab_parallel_merge_equals_full_vocab():
    g = torch.Generator().manual_seed(1)
    hidden, weight = torch.randn(9, 8, generator=g), torch.randn(48, 8, generator=g)
    shares = [dh.topk_logprobs_local(hidden, weight[r * 12 : (r + 1) * 12], 5, vocab_start=r * 12)
              for r in range(4)]
    lp, ids = dh.merge_vocab_shards(*(torch.stack(x) for x in zip(*shares)), topk=5)
    ref_lp, ref_ids = _dense(hidden, weight, 5)
    torch.testing.assert_close(lp, ref_lp, atol=1e-5, rtol=1e-5)
    assert torch.equal(ids, ref_ids)


class _Head:  # stand-in for a target lm_head without shard metadata
    def __init__(self, weight):
        self.weight = weight


class _Model:
    def __init__(self, weight):
        self.lm_head = _Head(weight)


def test_head_reads_block_positions_one_to_l_minus_one():
    g = torch.Generator().manual_seed(2)
    weight = torch.randn(30, 8, generator=g)
    head, reason = dh.build_draft_head(_Model(weight), block_size=4, topk=3, max_bs=5, tp_group=None)
    assert head is not None, reason
    hidden = torch.randn(2 * 4, 8, generator=g)
    head(hidden)  # the capture-tail call writes the static buffers
    lp, ids = head.read(2)
    ref_lp, ref_ids = _dense(hidden.view(2, 4, 8)[:, 1:].reshape(-1, 8), weight, 3)
    torch.testing.assert_close(lp.reshape(-1, 3), ref_lp, atol=1e-5, rtol=1e-5)
    assert torch.equal(ids.reshape(-1, 3), ref_ids)
    assert lp.shape == (2, 3, 3)


def test_head_refuses_quantized_lm_head():
    head, reason = dh.build_draft_head(_Model(torch.zeros(4, 4, dtype=torch.int8)), block_size=4, topk=2,
                                       max_bs=1, tp_group=None)
    assert head is None and "quantized" in reason


def test_the_head_takes_its_top_k_pass_from_the_environment(monkeypatch):
    """SGLANG_DDTREE_TOPK_THRESHOLD: unset or 1 the threshold pass, 0 every slice's top-K (same result);
    another value is one error line naming the variable."""
    weight = torch.randn(30, 8)
    monkeypatch.delenv(dh.TOPK_THRESHOLD_ENV, raising=False)
    assert dh.build_draft_head(_Model(weight), block_size=4, topk=3, max_bs=2, tp_group=None)[0].select == "threshold"
    monkeypatch.setenv(dh.TOPK_THRESHOLD_ENV, "0")
    assert dh.build_draft_head(_Model(weight), block_size=4, topk=3, max_bs=2, tp_group=None)[0].select == "all"
    monkeypatch.setenv(dh.TOPK_THRESHOLD_ENV, "1")
    head = dh.build_draft_head(_Model(weight), block_size=4, topk=3, max_bs=2, tp_group=None)[0]
    assert head.select == "threshold"
    seen, real = [], dh.topk_lse

    def spy(*args, **kw):
        seen.append(kw["select"])
        return real(*args, **kw)

    monkeypatch.setattr(dh, "topk_lse", spy)
    hidden = torch.randn(2 * 4, 8)
    lp, ids = head.compute(hidden)
    assert seen and set(seen) == {"threshold"}
    ref_lp, ref_ids = _dense(hidden.view(2, 4, 8)[:, 1:].reshape(-1, 8), weight, 3)
    torch.testing.assert_close(lp.reshape(-1, 3), ref_lp, atol=1e-5, rtol=1e-5)
    assert torch.equal(ids.reshape(-1, 3), ref_ids)
    monkeypatch.setenv(dh.TOPK_THRESHOLD_ENV, "yes")
    with pytest.raises(ValueError, match="SGLANG_DDTREE_TOPK_THRESHOLD='yes': use 1"):
        dh.topk_select()


def test_the_start_up_log_names_the_pass_and_the_switch():
    assert dh.describe_select("threshold") == "threshold pass, 2048 x 4 (SGLANG_DDTREE_TOPK_THRESHOLD=0: every slice's)"
    assert dh.describe_select("all") == "every slice's pass, 4096 x 8 (SGLANG_DDTREE_TOPK_THRESHOLD=0)"


def test_the_heads_launch_follows_its_pass_and_an_unknown_pass_is_refused():
    assert dh.head_launch("threshold") == dict(select="threshold", block=2048, num_warps=4)
    assert dh.head_launch("all") == dict(select="all", block=4096, num_warps=8)
    for gone in ("rows", "some"):  # "rows" (the 100-row cutoff) until session 29
        with pytest.raises(ValueError, match="select must be one of"):
            dh.topk_lse(torch.randn(2, 5), 2, torch.empty(2, 2), torch.empty(2, 2, dtype=torch.int64), torch.empty(2),
                        select=gone)
