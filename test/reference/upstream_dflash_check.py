"""Hold the reference DFlash drafter against SGLang 0.5.16's own ``DFlashDraftModel`` on the CPU.

Run as a subprocess by ``test_dflash.py`` (it initialises a 1-process gloo group and SGLang's global
server args, which must not leak into other tests). Upstream modules do the loading, the context
projection, K/V materialisation and the layer stack; only what needs a GPU is stubbed: RoPE (replaced
by the reference's, itself checked against transformers) and RadixAttention (replaced by plain SDPA of
the block over [context K/V, block K/V], non-causal, as SGLang's ENCODER_ONLY draft attention is).
Prints one JSON line of results.
"""

import json
import os
import sys
import tempfile

import torch
import torch.nn.functional as F


class _Rope(torch.nn.Module):  # stands in for sglang's get_rope(...) module: (positions, q, k) -> (q, k)
    def __init__(self, head_dim, theta):
        super().__init__()
        self.head_dim, self.theta = head_dim, theta

    def forward(self, positions, q, k):
        from sglang_ddtree.reference.qwen3 import apply_rope

        def rot(x):  # [T, n*D] -> rope over heads
            h = x.view(x.shape[0], -1, self.head_dim).transpose(0, 1)[None]
            return apply_rope(h, positions[None], self.theta)[0].transpose(0, 1).reshape(x.shape)

        return rot(q), rot(k)


class _Attn(torch.nn.Module):  # stands in for RadixAttention: block queries over [ctx ; block] K/V
    def __init__(self, n_heads, n_kv, head_dim, ctx_k, ctx_v):
        super().__init__()
        self.n_heads, self.n_kv, self.d, self.ctx_k, self.ctx_v = n_heads, n_kv, head_dim, ctx_k, ctx_v

    def forward(self, q, k, v, forward_batch):
        def heads(x, n):
            return x.view(x.shape[0], n, self.d).transpose(0, 1)

        rep = self.n_heads // self.n_kv
        kk = torch.cat([heads(self.ctx_k, self.n_kv), heads(k, self.n_kv)], 1).repeat_interleave(rep, 0)
        vv = torch.cat([heads(self.ctx_v, self.n_kv), heads(v, self.n_kv)], 1).repeat_interleave(rep, 0)
        out = F.scaled_dot_product_attention(heads(q, self.n_heads), kk, vv)
        return out.transpose(0, 1).reshape(q.shape[0], -1)


def main():
    sys.path.insert(0, sys.argv[1])  # the checkout's python/
    torch.set_num_threads(1)
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.runtime_context import get_context

    # Upstream's own default ServerArgs, published process-wide (from 0.5.17 layers read the config
    # namespaces, and the parallel one must exist before the model-parallel groups are made).
    get_context().override_server_args().install()
    ps.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                    distributed_init_method=f"tcp://127.0.0.1:{sys.argv[2]}")
    ps.initialize_model_parallel()  # one rank: every width is 1 (0.5.16's defaults; from 0.5.22 the published ones)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                    "scripts"))
    from make_hybrid_fixture import stamp_single_rank  # one process as rank 0 (0.5.21+)

    stamp_single_rank()

    import sglang.srt.models.dflash as upstream
    from safetensors.torch import load_file
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config
    from transformers import AutoConfig

    from sglang_ddtree.reference.qwen3 import KVCache
    from sglang_ddtree.reference.toy import random_drafter, random_target

    target = random_target(3, sharp=False)
    drafter = random_drafter(target, 3, sharp=False, num_layers=2, block_size=6, target_layer_ids=(0, 2))
    with torch.no_grad():  # make every norm weight distinctive so a missed load would show
        for name, p in drafter.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.3 * torch.randn_like(p))
    path = tempfile.mkdtemp()
    drafter.save_pretrained(path)
    cfg = AutoConfig.from_pretrained(path)
    dc = parse_dflash_draft_config(draft_hf_config=cfg)
    head_dim = drafter.config.head_dim
    upstream.get_rope = lambda *a, **k: _Rope(head_dim, k.get("base"))
    model = upstream.DFlashDraftModel(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    model.load_weights(load_file(f"{path}/model.safetensors").items())

    ours = drafter.state_dict()
    loaded_ok = []
    for name, p in model.named_parameters():
        if "qkv_proj" in name:
            want = torch.cat([ours[name.replace("qkv_proj", x)] for x in ("q_proj", "k_proj", "v_proj")])
        elif "gate_up_proj" in name:
            want = torch.cat([ours[name.replace("gate_up_proj", x)] for x in ("gate_proj", "up_proj")])
        else:
            want = ours[name]
        loaded_ok.append(torch.equal(p.detach(), want))

    # Forward: S context tokens, one block at position S.
    S, L, H = 9, drafter.config.block_size, drafter.config.hidden_size
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(S, 2 * H, generator=g)
    block = torch.randint(target.config.vocab_size, (L,), generator=g)
    block[1:] = drafter.config.mask_token_id
    positions = torch.arange(S, S + L)
    with torch.no_grad():
        embeds = target.embed(block)
        ctx = model.project_target_hidden(feats)
        for layer in model.layers:
            a = layer.self_attn
            k, v = a.kv_proj_only(ctx)
            k = a.apply_k_rope(torch.arange(S), a.apply_k_norm(k))
            a.attn = _Attn(a.num_heads, a.num_kv_heads, a.head_dim, k, v)
        up_hidden = model(None, positions, None, input_embeds=embeds).hidden_states
        context = KVCache(drafter.config.num_hidden_layers)
        context.append(drafter.context_kv(feats[None], torch.arange(S)[None]))
        ref_hidden = drafter(embeds[None], positions[None], context)[0]
    print(json.dumps({
        "block_size": dc.block_size, "target_layer_ids": dc.target_layer_ids, "mask_token_id": dc.mask_token_id,
        "num_upstream_params": len(loaded_ok), "all_loaded": all(loaded_ok),
        "max_abs_diff": float((up_hidden - ref_hidden).abs().max()),
        "scale": float(ref_hidden.abs().max()),
    }))


if __name__ == "__main__":
    main()
