#!/usr/bin/env python3
"""A tiny hybrid Qwen3.5 target (Gated DeltaNet + full attention) and a DFlash drafter for it, for
the tests of DDTREE's hybrid support (SGLang 0.5.16; README "Hybrid Mamba/GDN targets").

    python scripts/make_hybrid_fixture.py OUT [--seed 0] [--plain] [--check]

writes OUT/target/ (``Qwen3_5ForConditionalGeneration``, the architecture of the Qwen3.5 models that
z-lab's DFlash drafters target; SGLang 0.5.16 serves it with ``models/qwen3_5.py``) and OUT/draft/
(``DFlashDraftModel``). The target has the Hugging Face checkpoint layout of a real Qwen3.5
(``model.language_model.*``, split ``in_proj_qkv`` / ``in_proj_z`` / ``in_proj_b`` / ``in_proj_a``,
``conv1d`` [conv_dim, 1, kernel], ``A_log``, ``dt_bias``, gated q_proj, Gemma-style (1 + w) norms) at
toy size: hidden 128, 6 layers (full_attention_interval 3: layers 2 and 5 full attention, the other 4
Gated DeltaNet with 2 key / 4 value heads x 128), 2 query heads x head_dim 256 over 1 KV head,
partial RoPE 0.25 with Qwen3.5's interleaved M-RoPE sections, a 1-block vision tower (never used for
text; its image / video processor configs are shipped as a real checkpoint's are, since SGLang loads the
processor of this architecture for text requests too), untied lm_head, vocab 2048 and the packaged tiny pair's
tokenizer (``<|endoftext|>`` = 0, ``<|MASK|>`` = 1). The drafter: 2 layers, block 16, reading target layers (1, 2) (one linear, one
full attention). bf16, ~7 MB in all (tokenizers included), deterministic from ``--seed``.

Weights are random and "sharp" as ``test/worker/_generated_models.py``'s are: the token embedding and
lm_head come from ``toy.random_target(sharp=True, margin=8)`` (a successor map; median greedy gap ~4
logits) and every layer's output projection is scaled by 0.05, so greedy decoding survives bf16
rounding; the drafter is ``toy.random_drafter(sharp=True)``. The price: the linear-attention state only
nudges the logits, so a state bug shows in log-probs before it shows in greedy tokens. ``--plain``
skips the scaling and the successor map (the state visibly moves the logits; near-ties expected).

``--check`` then holds the files against SGLang on this CPU, in this process (it initialises a gloo
group and SGLang's global server args): the config parses through ``ModelConfig`` and is hybrid for
``mambaish_config``; the registry maps the architecture to SGLang's Qwen3.5 class, which is built on the
CPU and loads the checkpoint with every parameter written (all set to NaN first) and no checkpoint
tensor left over, stacked params equal to their parts; the same for SGLang's ``DFlashDraftModel``; and
both DDTREE refusals on a release other than 0.5.16 (validation and worker) fire alike; transformers' own Qwen3.5 loads the target with no
missing or unexpected keys and decodes the same greedy tokens in float32 and bf16. Prints one JSON line;
exit 1 if a check fails. What a CPU cannot check: SGLang's GPU kernels (GDN, attention, CUDA graphs) on it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import shutil
import sys
import types

VOCAB, EOS_ID, MASK_ID = 2048, 0, 1  # the packaged tiny pair's tokenizer
HIDDEN, INTERMEDIATE, LAYERS, FULL_ATTENTION_INTERVAL = 128, 256, 6, 3
HEADS, KV_HEADS, HEAD_DIM = 2, 1, 256
LINEAR_K_HEADS, LINEAR_V_HEADS, LINEAR_HEAD_DIM, CONV_KERNEL = 2, 4, 128, 4
DRAFT_LAYERS, BLOCK_SIZE, TARGET_LAYER_IDS = 2, 16, (1, 2)
MARGIN = 8.0  # toy's successor-logit margin (its default 4 is for hidden 256: at 128 the gaps are noisier)
LAYER_SCALE = 0.05  # sharp: layer outputs ~ 0 next to the embedding (as toy._shrink_layer_outputs)
ROPE_THETA = 10_000_000.0
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
_TEXT = "model.language_model"


def layer_types() -> list:
    return ["full_attention" if (i + 1) % FULL_ATTENTION_INTERVAL == 0 else "linear_attention"
            for i in range(LAYERS)]


def target_config() -> dict:
    """config.json of the target, in the layout of a published Qwen3.5 checkpoint."""
    ids = dict(bos_token_id=EOS_ID, eos_token_id=EOS_ID, pad_token_id=EOS_ID)
    text = dict(
        model_type="qwen3_5_text", vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS, layer_types=layer_types(), full_attention_interval=FULL_ATTENTION_INTERVAL,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, attn_output_gate=True,
        attention_bias=False, attention_dropout=0.0, hidden_act="silu", rms_norm_eps=1e-6,
        linear_num_key_heads=LINEAR_K_HEADS, linear_num_value_heads=LINEAR_V_HEADS,
        linear_key_head_dim=LINEAR_HEAD_DIM, linear_value_head_dim=LINEAR_HEAD_DIM,
        linear_conv_kernel_dim=CONV_KERNEL, mamba_ssm_dtype="float32", max_position_embeddings=4096,
        partial_rotary_factor=0.25, initializer_range=0.02, use_cache=True, tie_word_embeddings=False,
        rope_parameters=dict(rope_type="default", rope_theta=ROPE_THETA, partial_rotary_factor=0.25,
                             mrope_section=[11, 11, 10], mrope_interleaved=True),
        dtype="bfloat16", **ids)
    vision = dict(  # a 1-block tower: SGLang builds and loads it, text never runs it
        model_type="qwen3_5_vision", depth=1, hidden_size=32, intermediate_size=64, num_heads=2,
        in_channels=3, patch_size=16, temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=64,
        out_hidden_size=HIDDEN, hidden_act="gelu_pytorch_tanh", initializer_range=0.02,
        deepstack_visual_indexes=[])  # Qwen3.5 has no deepstack (SGLang's default would add 3 mergers)
    # image / video / vision-bracket ids: the top of the small vocab (unused by text-only requests)
    return dict(architectures=["Qwen3_5ForConditionalGeneration"], model_type="qwen3_5", text_config=text,
                vision_config=vision, vision_start_token_id=VOCAB - 4, vision_end_token_id=VOCAB - 3,
                image_token_id=VOCAB - 2, video_token_id=VOCAB - 1, tie_word_embeddings=False,
                torch_dtype="bfloat16", dtype="bfloat16", **ids)


def _vision_shapes(v: dict) -> dict:
    h, i, m2 = v["hidden_size"], v["intermediate_size"], v["spatial_merge_size"] ** 2
    p, tp = v["patch_size"], v["temporal_patch_size"]
    shapes = {"patch_embed.proj.weight": (h, v["in_channels"], tp, p, p), "patch_embed.proj.bias": (h,),
              "pos_embed.weight": (v["num_position_embeddings"], h),
              "merger.norm.weight": (h,), "merger.norm.bias": (h,),
              "merger.linear_fc1.weight": (h * m2, h * m2), "merger.linear_fc1.bias": (h * m2,),
              "merger.linear_fc2.weight": (v["out_hidden_size"], h * m2),
              "merger.linear_fc2.bias": (v["out_hidden_size"],)}
    for b in range(v["depth"]):
        for name, shape in (("norm1", (h,)), ("norm2", (h,))):
            shapes[f"blocks.{b}.{name}.weight"], shapes[f"blocks.{b}.{name}.bias"] = shape, shape
        for name, (out, inp) in (("attn.qkv", (3 * h, h)), ("attn.proj", (h, h)),
                                 ("mlp.linear_fc1", (i, h)), ("mlp.linear_fc2", (h, i))):
            shapes[f"blocks.{b}.{name}.weight"], shapes[f"blocks.{b}.{name}.bias"] = (out, inp), (out,)
    return {f"model.visual.{k}": s for k, s in shapes.items()}


def _layer_tensors(i: int, kind: str, g, sharp: bool) -> dict:
    """One decoder layer's checkpoint tensors (float32). Linears ~ N(0, 1/fan_in); output projections
    scaled by LAYER_SCALE when sharp; norms as Hugging Face initialises them."""
    import torch

    def linear(out, inp, scale=1.0):
        return torch.randn(out, inp, generator=g) * (scale / inp ** 0.5)

    out_scale = LAYER_SCALE if sharp else 1.0
    p = f"{_TEXT}.layers.{i}."
    t = {p + "input_layernorm.weight": torch.zeros(HIDDEN),  # Gemma-style norms: x * (1 + w)
         p + "post_attention_layernorm.weight": torch.zeros(HIDDEN),
         p + "mlp.gate_proj.weight": linear(INTERMEDIATE, HIDDEN),
         p + "mlp.up_proj.weight": linear(INTERMEDIATE, HIDDEN),
         p + "mlp.down_proj.weight": linear(HIDDEN, INTERMEDIATE, out_scale)}
    if kind == "full_attention":
        a = p + "self_attn."
        t.update({a + "q_proj.weight": linear(2 * HEADS * HEAD_DIM, HIDDEN),  # query and output gate
                  a + "k_proj.weight": linear(KV_HEADS * HEAD_DIM, HIDDEN),
                  a + "v_proj.weight": linear(KV_HEADS * HEAD_DIM, HIDDEN),
                  a + "o_proj.weight": linear(HIDDEN, HEADS * HEAD_DIM, out_scale),
                  a + "q_norm.weight": torch.zeros(HEAD_DIM), a + "k_norm.weight": torch.zeros(HEAD_DIM)})
    else:
        a = p + "linear_attn."
        key_dim, value_dim = LINEAR_K_HEADS * LINEAR_HEAD_DIM, LINEAR_V_HEADS * LINEAR_HEAD_DIM
        conv_dim = 2 * key_dim + value_dim
        t.update({a + "in_proj_qkv.weight": linear(conv_dim, HIDDEN), a + "in_proj_z.weight": linear(value_dim, HIDDEN),
                  a + "in_proj_b.weight": linear(LINEAR_V_HEADS, HIDDEN),
                  a + "in_proj_a.weight": linear(LINEAR_V_HEADS, HIDDEN),
                  a + "conv1d.weight": torch.randn(conv_dim, 1, CONV_KERNEL, generator=g) / CONV_KERNEL ** 0.5,
                  a + "A_log": torch.empty(LINEAR_V_HEADS).uniform_(1e-2, 16, generator=g).log(),
                  a + "dt_bias": torch.ones(LINEAR_V_HEADS), a + "norm.weight": torch.ones(LINEAR_HEAD_DIM),
                  a + "out_proj.weight": linear(HIDDEN, value_dim, out_scale)})
    return t


def _toy_target(seed: int, sharp: bool):
    """The dense toy target whose embedding and lm_head the hybrid target reuses (and the drafter's
    stand-in target: same hidden size, heads, vocab and layer count)."""
    import torch

    from sglang_ddtree.reference.qwen3 import Qwen3Config
    from sglang_ddtree.reference.toy import random_target

    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, rope_theta=ROPE_THETA)
    with torch.random.fork_rng(devices=[]):  # toy seeds the global RNG: leave the caller's alone
        return random_target(seed=seed, sharp=sharp, cfg=cfg, mask_token_id=MASK_ID, margin=MARGIN)


def target_tensors(seed: int = 0, sharp: bool = True) -> dict:
    """{checkpoint name: bf16 tensor} of the hybrid target."""
    import torch

    toy = _toy_target(seed, sharp)
    g = torch.Generator().manual_seed(seed)
    t = {f"{_TEXT}.embed_tokens.weight": toy.model.embed_tokens.weight.detach().clone(),
         "lm_head.weight": toy.lm_head.weight.detach().clone(), f"{_TEXT}.norm.weight": torch.zeros(HIDDEN)}
    for i, kind in enumerate(layer_types()):
        t.update(_layer_tensors(i, kind, g, sharp))
    for name, shape in _vision_shapes(target_config()["vision_config"]).items():
        t[name] = torch.randn(*shape, generator=g) * 0.02
    return {k: v.to(torch.bfloat16).contiguous() for k, v in t.items()}


def processor_configs(vision: dict) -> dict:
    """The image / video processor configs a real Qwen3.5 checkpoint ships (SGLang's tokenizer manager loads its
    multimodal processor for this architecture even for text-only requests); patch sizes follow the tower."""
    common = dict(patch_size=vision["patch_size"], temporal_patch_size=vision["temporal_patch_size"],
                  merge_size=vision["spatial_merge_size"], image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
                  processor_class="Qwen3VLProcessor")
    return {
        "preprocessor_config.json": dict(common, image_processor_type="Qwen2VLImageProcessorFast",
                                         size={"longest_edge": 16777216, "shortest_edge": 65536}),
        "video_preprocessor_config.json": dict(common, video_processor_type="Qwen3VLVideoProcessor",
                                               size={"longest_edge": 25165824, "shortest_edge": 4096}, fps=2,
                                               min_frames=4, max_frames=768),
    }


def _copy_tokenizer(dst: str) -> None:
    from sglang_ddtree.fixtures import tiny_pair_path

    for name in TOKENIZER_FILES:
        shutil.copy(os.path.join(tiny_pair_path().target, name), os.path.join(dst, name))


def write_fixture(root: str, seed: int = 0, sharp: bool = True) -> tuple:
    """Write root/target and root/draft; returns (target_dir, draft_dir)."""
    import torch
    from safetensors.torch import save_file

    from sglang_ddtree.reference.toy import random_drafter

    target_dir, draft_dir = os.path.join(root, "target"), os.path.join(root, "draft")
    os.makedirs(target_dir, exist_ok=True)
    save_file(target_tensors(seed, sharp), os.path.join(target_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(target_dir, "config.json"), "w") as f:
        json.dump(target_config(), f, indent=1)
    with torch.random.fork_rng(devices=[]):
        drafter = random_drafter(_toy_target(seed, sharp), seed=seed, sharp=sharp, num_layers=DRAFT_LAYERS,
                                 block_size=BLOCK_SIZE, target_layer_ids=TARGET_LAYER_IDS, mask_token_id=MASK_ID)
    drafter.save_pretrained(draft_dir, dtype=torch.bfloat16)
    for name, config in processor_configs(target_config()["vision_config"]).items():
        with open(os.path.join(target_dir, name), "w") as f:
            json.dump(config, f, indent=1)
    for d in (target_dir, draft_dir):
        _copy_tokenizer(d)
    return target_dir, draft_dir


# ---- --check: the files against SGLang 0.5.16 on the CPU ----------------------------------------
def _init_sglang_cpu():
    """A 1-process gloo group, default server args, dp-attention state; a stand-in ``vllm._custom_ops``
    (SGLang's non-CUDA RotaryEmbedding imports its kernel at construction; nothing here calls it)."""
    import socket

    ops = types.ModuleType("vllm._custom_ops")
    ops.rotary_embedding = None
    sys.modules.setdefault("vllm", types.ModuleType("vllm")).__dict__.setdefault("_custom_ops", ops)
    sys.modules.setdefault("vllm._custom_ops", ops)
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.runtime_context import get_context

    # Upstream's own default ServerArgs, published process-wide before the model-parallel groups (from 0.5.17
    # layers read the config namespaces; a partial object lacks their fields).
    sa = get_context().override_server_args(device="cpu").install()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ps.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                    distributed_init_method=f"tcp://127.0.0.1:{port}")
    ps.initialize_model_parallel()  # one rank: every width is 1 (0.5.16 defaults; from 0.5.22 the published ones)
    stamp_single_rank()
    return sa


def stamp_single_rank() -> None:
    """From 0.5.21 a process's ranks are written by the scheduler's rank bundle, which this check has none of: the
    one process is rank 0 (``get_parallel().override_permanently``, upstream's way to state them without one)."""
    from sglang.srt import runtime_context

    parallel = getattr(runtime_context, "get_parallel", lambda: None)()
    if parallel is None or not hasattr(parallel, "override_permanently"):
        return
    unwritten = {}
    for name in sorted(getattr(runtime_context, "_parallel_fields", frozenset)()):  # (0.5.21+)
        if name.endswith("_rank"):
            try:
                getattr(parallel, name)
            except RuntimeError:
                unwritten[name] = 0
    if unwritten:
        parallel.override_permanently(**unwritten)


_STACKED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj"),
            "in_proj_qkvz": ("in_proj_qkv", "in_proj_z"), "in_proj_ba": ("in_proj_b", "in_proj_a")}
_ATTN_PARAMS = re.compile(r"^(model\.language_model\.layers\.\d+)\.(qkv_proj|o_proj|q_norm|k_norm)\.")


def checkpoint_parts(param: str, target: bool) -> list:
    """The checkpoint tensors an SGLang parameter is made of, in stacking order: our reading of
    ``Qwen3_5ForConditionalGeneration.load_weights`` (target) / ``DFlashDraftModel.load_weights``
    (drafter), which ``_load_report`` holds SGLang's loader to."""
    name = param
    if target:
        if name.startswith("visual."):
            return ["model." + name.replace(".attn.qkv_proj.", ".attn.qkv.")]
        if name.startswith("model."):
            name = f"{_TEXT}." + name[len("model."):]
            name = _ATTN_PARAMS.sub(r"\1.self_attn.\2.", name)
    for fused, parts in _STACKED.items():
        if f".{fused}." in name:
            return [name.replace(f".{fused}.", f".{part}.") for part in parts]
    return [name]


def _load_report(model, path: str, target: bool) -> dict:
    """Load ``path``'s safetensors into ``model`` (every parameter NaN first) and compare every
    parameter with the concatenation of its ``checkpoint_parts``: parameters left unwritten or
    different, checkpoint tensors no parameter is made of."""
    import torch
    from safetensors.torch import load_file

    weights = load_file(os.path.join(path, "model.safetensors"))
    params = dict(model.named_parameters())  # each tensor once (GDN's attn.A_log aliases A_log)
    with torch.no_grad():
        for p in params.values():
            p.fill_(float("nan"))
    model.load_weights(list(weights.items()))
    used, wrong = set(), []
    for name, p in params.items():
        parts = checkpoint_parts(name, target)
        used.update(parts)
        if not all(k in weights for k in parts):
            wrong.append(f"{name}: no checkpoint tensor {[k for k in parts if k not in weights]}")
            continue
        want = torch.cat([weights[k] for k in parts]).to(p.dtype)
        if tuple(want.shape) != tuple(p.shape) or not torch.equal(want, p.detach()):
            wrong.append(f"{name}: {tuple(p.shape)} != checkpoint {tuple(want.shape)} or values differ")
    return {"checkpoint_tensors": len(weights), "parameters": len(params),
            "unwritten": sorted(n for n, p in params.items() if torch.isnan(p.float()).any()),
            "wrong": wrong, "unused_checkpoint_tensors": sorted(set(weights) - used)}


def _ddtree_refusals(model_config) -> dict:
    """Both places DDTREE refuses a hybrid target on a release family whose hybrid backend its state commit was
    not verified against (stood in: 0.5.18), fed this fixture's config: the validation check
    (``_check_unsupported_features``, which reads the target's model config through the release adapter's
    ``target_model_config``: ``server_args.get_model_config()`` up to 0.5.18, ``ModelConfig.from_server_args``
    from 0.5.19, neither of which a stand-in of the server args can serve, so the adapter answers with this
    fixture's config here) and the worker's ``mambaish_config`` check in ``__init__``."""
    from unittest import mock

    from sglang_ddtree.compat import adapter
    from sglang_ddtree.validation import _check_unsupported_features
    from sglang_ddtree.worker.worker import DDTreeWorker

    out = {}
    other_release = mock.patch.object(adapter(), "family", "0.5.18")
    args = types.SimpleNamespace(speculative_draft_window_size=None, speculative_adaptive=False,
                                 disaggregation_mode="null")
    fixture_config = mock.patch.object(type(adapter()), "target_model_config",
                                       lambda self, server_args: types.SimpleNamespace(hf_config=model_config.hf_config))
    server_args = types.SimpleNamespace(speculative_algorithm="DDTREE", speculative_ddtree_budget=16,
                                        speculative_ddtree_topk=4, speculative_dflash_block_size=BLOCK_SIZE,
                                        speculative_num_draft_tokens=17)
    target_worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(model_config=model_config))

    def validate():
        with fixture_config:
            _check_unsupported_features(args)

    for where, call in (("validation", validate),
                        ("worker", lambda: DDTreeWorker(server_args=server_args, gpu_id=0, nccl_port=0,  # as the
                                                        target_worker=target_worker))):  # scheduler calls it
        try:
            with other_release:
                call()
            out[where] = None
        except ValueError as e:
            out[where] = str(e)
    return out


def successor_table(target_dir: str):
    """(succ, margin): the greedy token after each token x for a one-token context and its float32
    logit gap to the runner-up ([V] each): final norm (Gemma-style, weight 0: plain RMSNorm) of the
    embedding times lm_head, as ``_generated_models.successor_logits`` computes it for dense targets."""
    import torch
    from safetensors.torch import load_file

    w = load_file(os.path.join(target_dir, "model.safetensors"))
    emb = w[f"{_TEXT}.embed_tokens.weight"].float()
    x = emb * torch.rsqrt(emb.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + w[f"{_TEXT}.norm.weight"].float())
    top = (x.to(torch.bfloat16).float() @ w["lm_head.weight"].float().T).topk(2, -1)
    return top.indices[:, 0], top.values[:, 0] - top.values[:, 1]


def _transformers_report(target_dir: str, prompt=(5, 100, 300, 42), new_tokens: int = 12) -> dict:
    """A second reader of the checkpoint layout: transformers' own Qwen3.5 (torch GDN fallback)
    loads it with no missing or unexpected keys; its greedy continuation in float32 and in bf16."""
    import torch
    from transformers import Qwen3_5ForConditionalGeneration

    model, info = Qwen3_5ForConditionalGeneration.from_pretrained(target_dir, dtype=torch.float32,
                                                                  output_loading_info=True)
    ids = torch.tensor([list(prompt)])
    rep = {"loading_info": {k: sorted(map(str, v)) for k, v in info.items() if v}}
    for dtype in (torch.float32, torch.bfloat16):
        with torch.no_grad():
            out = model.to(dtype).eval().generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                                  do_sample=False, output_scores=True, return_dict_in_generate=True)
        top2 = torch.stack([s[0].float().topk(2).values for s in out.scores])
        rep[str(dtype).removeprefix("torch.")] = {"greedy": out.sequences[0, len(prompt):].tolist(),
                                                  "min_margin": round(float((top2[:, 0] - top2[:, 1]).min()), 3)}
    return rep


def check_fixture(target_dir: str, draft_dir: str) -> dict:
    """The --check report (see the module docstring); ``ok`` says whether every check passed."""
    sa = _init_sglang_cpu()
    from sglang.srt.configs.hybrid_arch import mambaish_config
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.model_loader.utils import get_model_architecture
    from sglang.srt.models.dflash import DFlashDraftModel
    from transformers import AutoConfig

    from sglang_ddtree.validation import is_hybrid_linear_attention

    mc = ModelConfig(target_dir)
    # 0.5.22 dropped its model_config parameter (it reads the published topology only)
    initialize_dp_attention(*((sa, mc) if "model_config" in inspect.signature(initialize_dp_attention).parameters
                              else (sa,)))
    text = mambaish_config(mc)
    cls, arch = get_model_architecture(mc)
    rep = {"hf_config": type(mc.hf_config).__name__, "architecture": arch, "model_class": cls.__name__,
           "mambaish_config": type(text).__name__ if text is not None else None,
           "is_hybrid_linear_attention": is_hybrid_linear_attention(mc.hf_config),
           "layers_block_type": list(text.layers_block_type) if text is not None else None}
    rep["target_load"] = _load_report(cls(mc.hf_config), target_dir, target=True)
    rep["draft_load"] = _load_report(DFlashDraftModel(AutoConfig.from_pretrained(draft_dir)), draft_dir, target=False)
    rep["ddtree_refusals"] = _ddtree_refusals(mc)
    rep["transformers"] = hf = _transformers_report(target_dir)
    loads_ok = all(not rep[k][f] for k in ("target_load", "draft_load")
                   for f in ("unwritten", "wrong", "unused_checkpoint_tensors"))
    rep["ok"] = (loads_ok and rep["mambaish_config"] is not None and rep["is_hybrid_linear_attention"]
                 and cls.__name__ == "Qwen3_5ForConditionalGeneration"
                 and all(v is not None for v in rep["ddtree_refusals"].values())
                 and not hf["loading_info"] and hf["float32"]["greedy"] == hf["bfloat16"]["greedy"])
    return rep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="directory to write target/ and draft/ into")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plain", action="store_true", help="plain random weights (no successor map, no 0.05 scaling)")
    ap.add_argument("--check", action="store_true", help="then hold the files against SGLang on the CPU")
    args = ap.parse_args(argv)
    target_dir, draft_dir = write_fixture(args.out, seed=args.seed, sharp=not args.plain)
    print(f"[make_hybrid_fixture] wrote {target_dir} and {draft_dir}", flush=True)
    if not args.check:
        return 0
    rep = check_fixture(target_dir, draft_dir)
    print(json.dumps(rep), flush=True)
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
    sys.exit(main())
