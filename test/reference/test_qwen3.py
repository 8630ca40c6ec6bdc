"""The reference Qwen3 target: parity with transformers, KV cache, masks, tree verify, features."""

import pytest
import torch

from sglang_ddtree.reference.loop import propose_tree, tree_verify_inputs
from sglang_ddtree.reference.qwen3 import KVCache, Qwen3ForCausalLM
from sglang_ddtree.reference.toy import random_target, tiny_target_config

TOL = dict(atol=1e-5, rtol=1e-5)  # float32


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(vocab_size=96, hidden_size=64, intermediate_size=112, num_hidden_layers=3,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                   rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)
    hf = transformers.Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():  # non-trivial norm weights
        for name, p in hf.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
    path = tmp_path_factory.mktemp("hf_qwen3")
    hf.save_pretrained(path)
    return hf, Qwen3ForCausalLM.from_pretrained(str(path)), path


@torch.no_grad()
def test_logits_and_features_equal_transformers(hf_pair):
    hf, ours, _ = hf_pair
    ids = torch.randint(96, (2, 13), generator=torch.Generator().manual_seed(1))
    want = hf(ids, output_hidden_states=True)
    got = ours(ids, torch.arange(13).expand(2, -1), capture_layer_ids=[1, 0])
    torch.testing.assert_close(got.logits, want.logits, **TOL)
    # features: output of layers 0 and 1 (HF hidden_states[k + 1]), ascending layer order like SGLang
    torch.testing.assert_close(got.features, torch.cat(want.hidden_states[1:3], -1), **TOL)


@torch.no_grad()
def test_save_pretrained_loads_in_transformers(hf_pair, tmp_path):
    transformers = pytest.importorskip("transformers")
    _, ours, _ = hf_pair
    ours.save_pretrained(str(tmp_path))
    hf2 = transformers.Qwen3ForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32).eval()
    ids = torch.arange(10)[None]
    torch.testing.assert_close(hf2(ids).logits, ours(ids, torch.arange(10)[None]).logits, **TOL)


def test_last_layer_and_duplicates_are_not_capturable():
    model = random_target(0, sharp=False, cfg=tiny_target_config(vocab_size=32, num_layers=3))
    ids = torch.zeros(1, 2, dtype=torch.long)
    for bad in ([2], [1, 1], [-1]):
        with pytest.raises(ValueError, match="target_layer_ids"):
            model(ids, torch.arange(2)[None], capture_layer_ids=bad)


@torch.no_grad()
def test_kv_cache_decoding_equals_full_forward():
    model = random_target(1, sharp=False)
    ids = torch.randint(200, (1, 12), generator=torch.Generator().manual_seed(0))
    full = model(ids, torch.arange(12)[None], capture_layer_ids=[0, 2])
    cache, chunks = KVCache(4), []
    for lo, hi in ((0, 5), (5, 6), (6, 12)):
        out = model(ids[:, lo:hi], torch.arange(lo, hi)[None], cache, capture_layer_ids=[0, 2])
        cache.append(out.kv)
        chunks.append(out)
    torch.testing.assert_close(torch.cat([c.logits for c in chunks], 1), full.logits, **TOL)
    torch.testing.assert_close(torch.cat([c.features for c in chunks], 1), full.features, **TOL)


@pytest.mark.parametrize("budget,topk", [(1, 1), (7, 1), (12, 3), (30, 5)])
@torch.no_grad()
def test_tree_verify_node_equals_causal_path_forward(budget, topk):
    """Each node's logits (and features) in the one-forward tree verify equal a plain causal forward
    over prefix + its root-to-node path; committing only an accepted path keeps the cache exact."""
    model = random_target(2, sharp=False)
    g = torch.Generator().manual_seed(budget)
    prefix = torch.randint(200, (1, 9), generator=g)
    cache = KVCache(4)
    cache.append(model(prefix, torch.arange(9)[None]).kv)
    tree = propose_tree(torch.randn(7, 256, generator=g) * 3, 5, budget, topk)
    ids, pos, mask = tree_verify_inputs(tree, start=9)
    parents = tree.parents[0]
    out = model(ids, pos, cache, mask, capture_layer_ids=[1])
    assert int(tree.num_nodes[0]) == budget + 1 or topk == 1
    for node in range(int(tree.num_nodes[0])):  # rows past num_nodes are pads
        path = [node]
        while parents[path[0]] >= 0:
            path.insert(0, int(parents[path[0]]))
        seq = torch.cat([prefix, ids[:, path]], 1)
        ref = model(seq, torch.arange(seq.shape[1])[None], capture_layer_ids=[1])
        torch.testing.assert_close(out.logits[0, node], ref.logits[0, -1], **TOL)
        torch.testing.assert_close(out.features[0, node], ref.features[0, -1], **TOL)
    # commit the deepest node's path, then decode one token from the compacted cache
    deepest = int(pos[0].argmax())
    path = [deepest]
    while parents[path[0]] >= 0:
        path.insert(0, int(parents[path[0]]))
    cache.append(out.kv, torch.tensor(path))
    nxt = model(torch.tensor([[3]]), torch.tensor([[cache.length]]), cache)
    seq = torch.cat([prefix, ids[:, path], torch.tensor([[3]])], 1)
    torch.testing.assert_close(nxt.logits[0, -1], model(seq, torch.arange(seq.shape[1])[None]).logits[0, -1], **TOL)
