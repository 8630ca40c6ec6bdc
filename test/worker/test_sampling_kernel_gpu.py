"""GPU: DDTREE's T > 0 accept step (``worker.sampling.node_samples``: one draw per node, then the round's
greedy ACCEPT + COMMIT kernel walks the tree with the draws) draws
every emitted token from plain decoding's filtered distribution, given the SAME logits.

The end-to-end test (``test_sampling_gpu.py``) compares engines, whose bf16 logits differ between the
verify forward and plain decoding; that noise moves top-p / top-k boundaries. Here the logits are fixed
float32 tensors and the expected distributions are exact, so a wrong filter order shows at full size:
root distribution [0.5, 0.3, 0.15, 0.05] at top_p 0.6 + top_k 2 is {0: 0.625, 1: 0.375} for plain
decoding and {0: 1.0} for top-k-renormalise-then-top-p (upstream eagle_sample's order).

Tree (one request, replicated over the batch): root -> {row 1: token 0, row 2: token 2}, row 1 -> {row 3:
token 2}. The first emitted token follows the root's filtered distribution; when it is 0 (row 1 accepted),
the second follows row 1's (when it is 2, row 2 is accepted; any other first token is the bonus). Goodness of fit against the exact distributions, p > P_MIN = 1e-4 per check
(12 checks); a wrong order gives p ~ 0 with these sample sizes.
"""

import os
import sys
from types import SimpleNamespace

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _sampling_stats as st  # noqa: E402

pytestmark = pytest.mark.gpu

P_MIN = 1e-4
VOCAB = 8
ROOT_PROBS = [0.5, 0.3, 0.15, 0.05]
ROW1_PROBS = [0.05, 0.25, 0.55, 0.15]
SETTINGS = {  # name: (temperature, top_p, top_k)
    "t1": (1.0, 1.0, -1),
    "t0.7": (0.7, 1.0, -1),
    "t1_k2": (1.0, 1.0, 2),
    "t1_p0.6": (1.0, 0.6, -1),
    "t1_p0.6_k2": (1.0, 0.6, 2),
    "t0.7_p0.8_k3": (0.7, 0.8, 3),
}


def _logits(probs):
    row = torch.full((VOCAB,), -30.0)
    row[: len(probs)] = torch.tensor(probs).log()
    return row


DEVICE = "cuda"


@pytest.fixture(scope="module")
def sampling():
    from sglang_ddtree.worker import sampling as mod

    return mod


def _round(sampling, monkeypatch, setting, bs):
    from sglang_ddtree.tree import Tree
    from sglang_ddtree.worker.kv_commit import greedy_accept_commit

    temperature, top_p, top_k = SETTINGS[setting]
    dev = torch.device(DEVICE)
    monkeypatch.setattr(sampling, "get_tp_group", lambda: SimpleNamespace(world_size=1))  # no engine here
    n = 4
    rep = lambda rows, dtype: torch.tensor(rows, dtype=dtype, device=dev).expand(bs, n).contiguous()  # noqa: E731
    tree = Tree(token_ids=rep([5, 0, 2, 2], torch.int64), parents=rep([-1, 0, 0, 1], torch.int64),
                depths=rep([0, 1, 1, 2], torch.int64), scores=rep([0.0, -0.1, -2.0, -0.5], torch.float32),
                valid=rep([True] * 4, torch.bool), num_nodes=torch.full((bs,), n, dtype=torch.int32, device=dev),
                max_depth=2)
    prefix = torch.full((bs,), 9, dtype=torch.int64, device=dev)
    verify_input = SimpleNamespace(draft_token=tree.token_ids.reshape(-1), draft_token_num=n)
    info = SimpleNamespace(
        is_all_greedy=False, temperatures=torch.full((bs, 1), temperature, device=dev),
        top_ps=torch.full((bs,), top_p, device=dev),
        top_ks=torch.full((bs,), top_k if top_k > 0 else 1 << 30, dtype=torch.int32, device=dev),
        need_top_p_sampling=top_p < 1.0, need_top_k_sampling=top_k > 0, acc_additive_penalties=None,
        acc_scaling_penalties=None, logit_bias=None)
    batch = SimpleNamespace(sampling_info=info, seq_lens=prefix, device=dev,
                            forward_mode=SimpleNamespace(is_idle=lambda: False))
    logits = torch.stack([_logits(ROOT_PROBS), _logits(ROW1_PROBS), _logits([0.5, 0.5]), _logits([1.0])])
    logits = logits.to(dev).repeat(bs, 1)
    draws = sampling.node_samples(verify_input, batch, SimpleNamespace(next_token_logits=logits))
    verify_loc = torch.arange(bs * n, device=dev).view(bs, n) + 100
    return greedy_accept_commit(tree, tree.token_ids, draws, verify_loc, prefix, 3)


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_emitted_tokens_follow_plain_distribution(sampling, monkeypatch, setting):
    temperature, top_p, top_k = SETTINGS[setting]
    firsts, seconds = [], []
    for _ in range(8):
        c = _round(sampling, monkeypatch, setting, bs=1000)
        out, lens = c.out_tokens.cpu(), c.accept_lens.cpu()
        assert int(lens.min()) >= 1 and int(lens.max()) <= 3
        firsts += out[:, 0].tolist()
        seconds += [int(out[i, 1]) for i in range(len(lens)) if int(out[i, 0]) == 0 and int(lens[i]) >= 2]
        # the round emits a second token exactly when the first one is a child of the root (token 0 or 2)
        assert all((int(out[i, 0]) in (0, 2)) == (int(lens[i]) >= 2) for i in range(len(lens)))
    want_first = st.plain_probs(_logits(ROOT_PROBS), temperature, top_p, top_k)
    want_second = st.plain_probs(_logits(ROW1_PROBS), temperature, top_p, top_k)
    for name, sample, probs in (("first", firsts, want_first), ("second | first = 0", seconds, want_second)):
        r = st.chi2_goodness_of_fit(sample, st.as_dict(probs, floor=1e-9))
        print(f"{setting} {name}: n {len(sample)} chi2 {r.stat:.1f} df {r.df} p {r.p:.3g}")
        assert r.p > P_MIN, (setting, name, r, st.as_dict(probs, floor=1e-9))
    if setting == "t1_p0.6_k2":  # the case where the filter order matters: token 1 must appear
        assert 0.3 < firsts.count(1) / len(firsts) < 0.45
