#!/usr/bin/env python3
"""Paired per-round cost at real model shapes: random (dummy) weights, no checkpoint, no tokenizer.

For each built-in shape this writes a Qwen3 (or hybrid Qwen3.5) target ``config.json`` and a DFlash drafter
``config.json``, starts one ``sglang.Engine`` per configuration in its own child process (``load_format="dummy"``,
the draft following it, or with ``--draft-weights normal`` loading a written N(0, 0.02) checkpoint so that DFLASH's
drafts vary as a real drafter's do; ``skip_tokenizer_init``), one after another, all alive on one GPU, and times them in rotated
alternation as ``bench_paired.py`` does. A measurement generates c random prompts at once twice, with M1
(``--new-tokens``) and M0 (``--base-tokens``) new tokens; per-round ms = (wall(M1) - wall(M0)) /
(rounds(M1) - rounds(M0)), rounds = the max over requests of ``spec_verify_ct`` (``completion_tokens - 1``
for plain), which cancels prefill and per-request set-up. Every generate gets fresh seeded prompts (the
same for every config), so no prefix cache hit skews one of the pair. Dummy weights accept ~1 token per
round, so throughput is projected as c * tau / round_ms from an accept-length table (``--accept-table``
or the built-in one below). ``--profile-dir`` also records a torch-profiler trace per config and listed
concurrency, embeds ``analyze_trace.analyze`` of it and reports the round's time outside its CUDA graphs
(``outside_graphs_ms``: unprofiled median round minus the profiled GPU time of the graph-replayed forwards).
Beside every measurement and profile: the host's 1-minute load average and the GPU's SM clock, power draw,
temperature and throttle reasons while it ran (``gpu``, from ``gpu_clocks.py``), so that two configs of one run
can be compared at equal clocks.

    python benchmark/bench_shape.py --out benchmark/results/shape.json [--shapes qwen3-8b,qwen3-4b,qwen3.5-9b] \
        [--configs plain,dflash,ddtree:16:8,ddtree:64:8,ddtree:auto:8] [--concurrency 1,2,4,8,16,32,64] [--repeats 3] \
        [--accept-table FILE.json] [--profile-dir D --profile-concurrency 1,32] [--draft-weights dummy|normal]
    python benchmark/bench_shape.py --plot shape.json[,shape_c16_64.json] --plot-dir plots/
Config specs as in ``bench_e2e.py`` (``plain`` | ``dflash`` | ``ddtree:<budget>:<topk>``, ``+fa3`` /
``+triton`` / ``+flashinfer`` / ``+nograph`` / ``+nooverlap``; ``+fa3tree`` / ``+fa3cascade``: fa3's tree verify
through DDTREE's fused kernel or upstream's cascade, ``worker.fa3_tree``).

Shapes. Qwen3-8B: 36 layers, hidden 4096, intermediate 12288, 32 / 8 heads, head_dim 128, vocab 151936,
rope_theta 1e6, untied embeddings; Qwen3-4B: hidden 2560, intermediate 9728, tied embeddings, else the
same (Qwen's config.json as copied into many Hub repos). Drafters, as sgl-project/SpecForge writes the
z-lab/Qwen3-{8B,4B}-DFlash-b16 layout (``configs/qwen3-8b-dflash.json``, ``configs/qwen3-4b-dflash.json``)
and as the speculators package's DFlash converter test writes z-lab's 8B source config: the target's
hidden / intermediate / heads, 5 full-attention layers, block 16, num_target_layers 36, target_layer_ids
[1, 9, 17, 25, 33], mask_token_id 151669, untied. Assumed: the z-lab config.json files themselves could not
be read here; ``mask_token`` "<|MASK|>" and ``dflash_config.block_size`` 16 are SGLang 0.5.16's defaults,
written out; the field layout (``rope_parameters``, ``layer_types``) is that of the packaged tiny pair.
SGLang's DFlash draft model has no embedding or LM head (it uses the target's): its tie flag changes nothing.
Qwen3.5-9B (``qwen3.5-9b``, hybrid: its engines run text-only without the radix cache, and DDTREE's with its
experimental hybrid switch, ``shape_settings``; budget auto there sizes one recurrent state per row for its largest
bucket, 64 rows per request, which DDTREE's validation refuses with the numbers where it does not fit): ``Qwen3_5ForConditionalGeneration``, 32 layers as 8 x (3 Gated DeltaNet + 1 full attention),
hidden 4096, intermediate 12288, 16 / 4 heads x head_dim 256 with the output gate, linear attention 16 key /
32 value heads x 128, conv kernel 4, vocab 248320, partial RoPE 0.25 (theta 1e7, interleaved M-RoPE
[11, 11, 10]), untied, and its vision tower (27 blocks, hidden 1152): the config a public test suite pins
as "the real Qwen3.5-9B config" (medrl's probe tests; the 4B's published values, hidden 2560 / 9216 /
262144 positions, as other suites pin them, share every other field). Its drafter has
z-lab/Qwen3.5-9B-DFlash's shape as SpecForge writes it (``configs/qwen3.5-9b-dflash-vlm-8layer.json``:
hidden 4096, intermediate 12288, 16 / 4 heads x 256, 5 layers, num_target_layers 32, target_layer_ids
[1, 8, 15, 22, 29] = SGLang's default for 32 / 5) with the z-lab Qwen3.5 drafters' block 16 and
mask_token_id 248070 (hipfire's dflash_convert notes on the z-lab/Qwen3.5-*-DFlash layout); ~1B
parameters, as published. Assumed: z-lab's config.json itself could not be read here; rope_theta 1e7
without M-RoPE and 262144 positions follow SpecForge's z-lab Qwen3.5-27B drafter config.

Accept table. DDTree paper (Ringel & Romano, arXiv 2604.12989), Qwen3-8B, MATH-500, T=0: DFlash tau 7.79
(Table 1); DDTree tau per node budget from the budget-tradeoff figure, read from the figure's vector PDF
in the authors' repository (liranringel/ddtree, branch site, ``public/assets/project/math500-budget-tradeoff.pdf``,
made by ``plot_results.py --case-study``, defaults Qwen3-8B / math500 / T=0), rounded to 0.01: 16: 8.61,
32: 9.27, 64: 9.75, 128: 10.20, 256: 10.43, 512: 10.73 (= Table 1's best-budget 10.73), 1024: 10.98. Their
tau counts the bonus token (tokens per round, as SGLang's ``spec_accept_length``).
A budget between table entries is interpolated linearly in log2(budget); outside, clamped (the report
says which).

Budget auto (``ddtree:auto:<topk>``). Its engine's processes get ``SGLANG_DDTREE_AUTO_ACCEPT_TABLE`` = the
projection table's ``ddtree`` entries (JSON {budget: tau}), so the policy chooses with the accept lengths the
projection then applies (``width_policy.TableAcceptModel`` interpolates and clamps as ``tau_for_budget``; the
paper's table starts at 16, so buckets 1 / 3 / 7 / 15 get a stated assumption in both,
``shape_projection.with_small_budgets``, named in the report's ``assumed`` and printed; state small budgets with
``--accept-table``).
Verified budgets per window (one measurement: the M0 and M1 generates of one concurrency and repetition):
the engine's own counter ``sglang:ddtree_budget_rounds_total{budget}`` (worker.metrics, fed by the worker's
``AutoStats``), read from the prometheus_client multiprocess directory each engine process gets fresh, before
the window and after each generate. Why this source: the production round already feeds it (the benchmark
adds no work to the round, it reads mmap'd files); it is structured; the decode-log line carries the same
numbers but is text, hidden by ``log_level=error`` and only written at log steps too. The counter also grows
only at decode-log steps, so a run with an auto config sets ``enable_metrics`` and ``decode_log_interval=1``
for EVERY config (paired: all pay the per-round log-step work on the host, DDTREE configs their accept
histogram too, a bias against DDTREE). What it cannot see: a round counts once the worker has read its
numbers back, at a later round's choice, so the last one or two rounds of a window count in the same
engine's next window (upstream also streams a round's output before its log step; after a generate the
child waits, untimed, until the counter stops moving); ``budget_rounds_coverage`` gives counted vs run rounds
per window. Prefill rounds draft nothing and are not counted.
Projection: tokens per round = the mean over the window's rounds of tau(b_r), tau(0) = 1 (no drafting
commits the bonus token), tau(b) as for a fixed budget -- NOT tau at the mean budget (tau is concave in the
budget and budget 0 sits far below it); projected tokens/s = c * that / round_ms. The repetitions' windows
pool for the headline tau; per-repetition ratios use each window's own; a window without counts voids the
config's projection.

Report (``--out``): command, environment, settings, shapes (both config.json and their dirs), accept_table,
results[shape][config][c] (round_ms per repetition and median / min / max, rounds, observed accept length,
tau and its source, projected_tokens_per_s, per-repetition ``round_ms_ratio_vs_<baseline>`` (this config's
round over the baseline's) and ``projected_speedup_vs_<baseline>``, ``profile``; auto also budget_rounds
pooled and per repetition, budget_rounds_coverage, budget_mean, tau_by_budget, tau_per_repetition),
best_projected[shape][c], engines[shape][config] (its environment, start + warm-up seconds, the accept table its
process saw), errors[shape] (a shape whose engines failed; the next shape still runs). ``--plot`` writes
``chosen_budget_<shape>.png`` (projected tok/s next to auto's budgets vs concurrency) when auto ran.
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import math
import os
import queue
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_e2e import ATTENTION_BACKENDS, engine_kwargs, environment, fa3_unavailable  # noqa: E402
from gpu_clocks import GpuSampler, visible_index  # noqa: E402

from shape_budgets import (ACCEPT_TABLE_ENV, AUTO_BUCKETS, BUDGET_COUNT_SETTINGS, config_env,  # noqa: E402
                           count_diff, settled_budget_rounds)
from shape_projection import (PAPER_ACCEPT, auto_record, config_key, is_auto, load_accept_table,  # noqa: E402
                              with_chain_bucket, with_small_budgets,
                              projected_tau, tau_for_budget)  # noqa: F401  (tau_for_budget: the tests' name)

from sglang_ddtree.config import AUTO_MAX_BUDGET, parse_bucket  # noqa: E402  (no torch, no SGLang)
from sglang_ddtree.hybrid_args import ENV as HYBRID_ENV  # noqa: E402  (no torch, no SGLang)
from sglang_ddtree.worker.metrics import AutoStats, export_auto_to_prometheus  # noqa: E402

_TAG = "@@BENCH_SHAPE "
CONTEXT_LENGTH = 1024
DRAFT_BLOCK = 16
TOKEN_IDS = (1000, 150000)  # random prompt ids are drawn from [1000, 150000)
SHAPES = {  # name: (hidden, intermediate, tie_word_embeddings); both have 36 layers, 32 / 8 heads, head_dim 128
    "qwen3-8b": (4096, 12288, False),
    "qwen3-4b": (2560, 9728, True),
}
# Hybrid Qwen3.5 targets (see the module docstring for the source of every value).
QWEN35_9B_TEXT = {
    "model_type": "qwen3_5_text", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 32,
    "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 8, "full_attention_interval": 4,
    "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256, "attn_output_gate": True,
    "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu", "rms_norm_eps": 1e-06,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "mamba_ssm_dtype": "float32",
    "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False, "vocab_size": 248320,
    "max_position_embeddings": 262144, "partial_rotary_factor": 0.25, "tie_word_embeddings": False,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                        "mrope_section": [11, 11, 10], "mrope_interleaved": True},
    "eos_token_id": 248044, "dtype": "bfloat16", "initializer_range": 0.02, "use_cache": True}
QWEN35_9B_VISION = {"model_type": "qwen3_5_vision", "depth": 27, "hidden_size": 1152, "intermediate_size": 4304,
                    "num_heads": 16, "num_position_embeddings": 2304, "out_hidden_size": 4096, "patch_size": 16,
                    "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3}
HYBRID_SHAPES = {  # name: (text_config, vision_config, drafter target_layer_ids, drafter mask_token_id)
    "qwen3.5-9b": (QWEN35_9B_TEXT, QWEN35_9B_VISION, [1, 8, 15, 22, 29], 248070),
}
SHAPE_NAMES = sorted([*SHAPES, *HYBRID_SHAPES])


# ---- shapes ------------------------------------------------------------------------------------
def shape_configs(name: str) -> tuple[dict, dict]:
    """(target config.json, drafter config.json) of a built-in shape."""
    if name in HYBRID_SHAPES:
        return _hybrid_shape_configs(name)
    hidden, inter, tied = SHAPES[name]
    common = {"model_type": "qwen3", "hidden_size": hidden, "intermediate_size": inter, "num_attention_heads": 32,
              "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "hidden_act": "silu",
              "attention_bias": False, "attention_dropout": 0.0, "rms_norm_eps": 1e-06,
              "max_position_embeddings": 40960, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
              "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": 151645, "initializer_range": 0.02,
              "use_cache": True, "use_sliding_window": False, "sliding_window": None}
    target = dict(common, architectures=["Qwen3ForCausalLM"], num_hidden_layers=36, max_window_layers=36,
                  layer_types=["full_attention"] * 36, tie_word_embeddings=tied)
    draft = dict(common, architectures=["DFlashDraftModel"], num_hidden_layers=5, max_window_layers=5,
                 layer_types=["full_attention"] * 5, tie_word_embeddings=False, block_size=DRAFT_BLOCK,
                 num_target_layers=36,
                 dflash_config={"target_layer_ids": [1, 9, 17, 25, 33], "mask_token": "<|MASK|>",
                                "mask_token_id": 151669, "block_size": DRAFT_BLOCK})
    return target, draft


def _hybrid_shape_configs(name: str) -> tuple[dict, dict]:
    """A Qwen3.5 target (vision tower included: SGLang builds it, text never runs it) and a DFlash drafter
    with the target's hidden / intermediate / attention heads, 5 full-attention layers."""
    text, vision, layer_ids, mask_id = HYBRID_SHAPES[name]
    target = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "text_config": dict(text),
              "vision_config": dict(vision), "image_token_id": 248056, "video_token_id": 248057,
              "vision_start_token_id": 248053, "vision_end_token_id": 248054,
              "tie_word_embeddings": text["tie_word_embeddings"], "torch_dtype": "bfloat16"}
    draft = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": text["hidden_size"],
             "intermediate_size": text["intermediate_size"], "num_attention_heads": text["num_attention_heads"],
             "num_key_value_heads": text["num_key_value_heads"], "head_dim": text["head_dim"],
             "vocab_size": text["vocab_size"], "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0,
             "rms_norm_eps": text["rms_norm_eps"], "max_position_embeddings": text["max_position_embeddings"],
             "rope_parameters": {"rope_theta": float(text["rope_parameters"]["rope_theta"]), "rope_type": "default"},
             "torch_dtype": "bfloat16", "eos_token_id": text["eos_token_id"], "initializer_range": 0.02,
             "use_cache": True, "num_hidden_layers": 5, "layer_types": ["full_attention"] * 5,
             "tie_word_embeddings": False, "block_size": DRAFT_BLOCK, "num_target_layers": text["num_hidden_layers"],
             "dflash_config": {"target_layer_ids": list(layer_ids), "mask_token": "<|MASK|>",
                               "mask_token_id": mask_id, "block_size": DRAFT_BLOCK}}
    return target, draft


# ---- memory ------------------------------------------------------------------------------------
def _kv_bytes_per_token(cfg: dict) -> int:
    return cfg["num_hidden_layers"] * 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * 2  # K and V, bf16


def engine_floor_gib(target: dict, draft: dict, spec: str, max_total_tokens: int):
    """A lower bound of one engine's GPU memory in GiB: its bf16 weights (the target's, counted on the reference
    model built on the meta device; a speculative config adds the drafter's, ``draft_weight_shapes``, which shares
    the target's embedding and LM head) and its KV pools of ``max_total_tokens`` (the drafter keeps one of its own).
    None for a shape it does not count (hybrid targets). On the H100, session 32's engines of the 8B shape held
    19.8 (plain) and 22.9 GiB (DFLASH, DDTREE) at 24,000 tokens; this gives 18.6 and 21.0."""
    if "text_config" in target:
        return None
    import torch

    from sglang_ddtree.reference.qwen3 import Qwen3Config, Qwen3ForCausalLM

    with torch.device("meta"):
        weights = sum(p.numel() for p in Qwen3ForCausalLM(Qwen3Config.from_hf_dict(target)).parameters())
    kv = _kv_bytes_per_token(target)
    if config_key(spec)[0] != "plain":
        weights += sum(math.prod(shape) for shape in draft_weight_shapes(draft).values())
        kv += _kv_bytes_per_token(draft)
    return (2 * weights + kv * max_total_tokens) / 2 ** 30


def gpu_total_gib():
    """The first visible GPU's memory in GiB, from nvidia-smi; None when it cannot say (no GPU, no nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", "-i", str(visible_index()), "--query-gpu=memory.total",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
        return float(out.stdout.strip().splitlines()[0]) / 1024 if out.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


# What an engine holds beyond weights and KV (``engine_estimate_gib``), from session 40's 8B-shape engines on an H100 at
# c 64 (max_running_requests and decode graphs up to 64, --max-total-tokens 24000): plain decoding held 20.65 GiB
# against a floor of 18.6, DFLASH 25.42 against 21.0, and budget auto ran out of memory at its first prefill with
# 33.03 GiB, having captured 9.45 GB of verify graphs (its largest bucket's 5.35 at 64 rows a request, the other
# buckets' 4.10 at 79 rows: 143 rows a request x 64 requests; ``session40/shape_c64_oom``). Graph memory goes with
# the captured rows, and at these widths mostly with the logits: ~6.8 bytes per vocabulary entry a row.
GRAPH_BYTES_PER_ROW_PER_VOCAB = 7.0
# CUDA context, workspaces and the first prefill's activations per engine: plain decoding's 2.0 GiB over its floor
# and graphs, and 1.5 more, so that session 40's trio at c 64 (plain, DFLASH, auto), which ran out of memory, is
# refused on an 80 GB H100 while the same trio at c 32, which ran, is not (estimates 81.1 and 76.1 GiB of 79.6).
ENGINE_HEADROOM_GIB = 3.5


def captured_rows(spec: str, attention_backend: str) -> int:
    """Rows a request the target's decode / verify CUDA graphs are captured at, summed over the graph sets an engine
    keeps: plain 1, DFLASH its block, DDTREE budget + 1, auto every bucket's width (and the chain's on fa3)."""
    kind, budget = config_key(spec)
    if kind == "plain":
        return 1
    if kind == "dflash":
        return DRAFT_BLOCK
    if budget != "auto":
        return int(budget) + 1
    chain = ("nochain" not in spec.split("+")
             and engine_kwargs(spec, "D", attention_backend)["attention_backend"] == "fa3")
    return sum(int(b) + 1 for b in AUTO_BUCKETS) + (DRAFT_BLOCK if chain else 0)


def engine_estimate_gib(target: dict, draft: dict, spec: str, max_total_tokens: int, max_batch_size: int,
                        attention_backend: str):
    """One engine's GPU memory in GiB, estimated: ``engine_floor_gib`` plus its CUDA graphs (``captured_rows`` x
    ``max_batch_size`` rows at ``GRAPH_BYTES_PER_ROW_PER_VOCAB``) and ``ENGINE_HEADROOM_GIB``. None where the floor
    is."""
    floor = engine_floor_gib(target, draft, spec, max_total_tokens)
    if floor is None:
        return None
    rows = captured_rows(spec, attention_backend) * int(max_batch_size)
    return floor + rows * GRAPH_BYTES_PER_ROW_PER_VOCAB * int(target["vocab_size"]) / 2 ** 30 + ENGINE_HEADROOM_GIB


def memory_shortfall(shape: str, configs, max_total_tokens: int, total_gib, max_batch_size: int = 1,
                     attention_backend: str = "triton"):
    """Why ``configs``' engines of ``shape``, all alive together, cannot fit a GPU of ``total_gib`` (the sum of their
    ``engine_estimate_gib`` at ``max_batch_size`` running requests, ``attention_backend`` where a config names none
    (the CLI's default), exceeds it), or None (they may fit, or either side
    is unknown). Said before any engine starts: session 32's first 8B-shape run on an 80 GB H100 spent 200 s
    starting three engines of five before the fourth ran out of memory, and in session 40 the third of three
    engines at c 64 (budget auto) ran out of memory at its first prefill, ~200 s in, where weights and KV alone
    fitted."""
    if total_gib is None:
        return None
    target, draft = shape_configs(shape)
    need = [engine_estimate_gib(target, draft, spec, max_total_tokens, max_batch_size, attention_backend)
            for spec in configs]
    if any(n is None for n in need) or sum(need) <= total_gib:
        return None
    return (f"{len(configs)} engines of {shape} stay alive together and need about {sum(need):.1f} GiB (weights + "
            f"KV at --max-total-tokens {max_total_tokens}, CUDA graphs at batch sizes up to {max_batch_size}, "
            f"{ENGINE_HEADROOM_GIB:g} GiB of headroom each), more than the GPU's {total_gib:.1f} GiB: pass fewer "
            f"--configs, a lower --concurrency or a smaller --max-total-tokens")


# The drafter's weights (--draft-weights). With SGLang's dummy initialisation a DFlash drafter drafts one token 15
# times, the same token in every request (session 20, results/session20/dummy_drafts.py), and one GEMM over such rows
# runs 14 % faster at the H200's power cap than over distinct rows (session 21, results/session21/gemm_power.json):
# DFLASH's verify rounds then cost less than a real drafter's would. ``normal`` writes the drafter a checkpoint of
# matrices N(0, NORMAL_DRAFT_STD) and norm weights 1 and loads it (the target stays dummy): on a CPU model of the 8B
# shape's vocabulary its DFLASH blocks hold 3-11 distinct tokens of 16 (median 8.5) instead of 2, a DDTREE tree
# 9-11 (session 21, results/session21/draft_init_drafts.py).
DRAFT_WEIGHTS = ("dummy", "normal")
NORMAL_DRAFT_STD = 0.02


def draft_weight_shapes(draft: dict) -> dict:
    """{tensor name: shape} of a DFlash drafter checkpoint for the drafter config ``draft``: the reference drafter's
    (``sglang_ddtree.reference.dflash``, built on the meta device), whose names are the ones SGLang's DFlash loader
    maps (it skips unknown names without a word; the drafter shares the target's embedding and LM head)."""
    import torch

    from sglang_ddtree.reference.dflash import DFlashConfig, DFlashDraftModel

    with torch.device("meta"):
        model = DFlashDraftModel(DFlashConfig.from_hf_dict(draft))
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def write_normal_draft_weights(draft_dir: str, draft: dict, *, std: float = NORMAL_DRAFT_STD, seed: int = 0) -> str:
    """Write ``<draft_dir>/model.safetensors``: every matrix of ``draft_weight_shapes`` N(0, std), every norm weight
    1, bf16, seeded; returns its path (the 8B shape's drafter: 1.05e9 parameters, 2.1 GB, seconds on a CPU)."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    tensors = {name: (torch.ones(shape) if len(shape) == 1 else torch.randn(shape, generator=g).mul_(std)
                      ).to(torch.bfloat16) for name, shape in draft_weight_shapes(draft).items()}
    path = os.path.join(draft_dir, "model.safetensors")
    save_file(tensors, path, metadata={"format": "pt"})
    return path


def draft_load_settings(draft_weights: str, kwargs: dict) -> dict:
    """Engine kwargs of a config with a drafter (``kwargs`` from ``engine_kwargs``) that load the drafter from the
    checkpoint ``write_shape`` wrote, while the target stays dummy; nothing for ``dummy`` or a config without one."""
    if draft_weights == "normal" and "speculative_draft_model_path" in kwargs:
        return {"speculative_draft_load_format": "auto"}
    return {}


def write_shape(model_dir: str, name: str, draft_weights: str = "dummy") -> tuple[str, str]:
    """Write ``<model_dir>/<name>/{target,draft}/config.json`` (and, for ``draft_weights="normal"``, the drafter's
    checkpoint); returns the two directories."""
    if draft_weights not in DRAFT_WEIGHTS:
        raise ValueError(f"draft_weights must be one of {DRAFT_WEIGHTS}, got {draft_weights!r}")
    dirs = []
    for role, cfg in zip(("target", "draft"), shape_configs(name)):
        d = os.path.join(model_dir, name, role)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
        if role == "draft" and draft_weights == "normal":
            write_normal_draft_weights(d, cfg)
        dirs.append(d)
    return dirs[0], dirs[1]


def prompts(seed: int, tag: str, c: int, length: int) -> list:
    """c random prompts of ``length`` token ids, the same in every process for the same arguments."""
    rng = random.Random(f"{seed}:{tag}:{c}")
    return [[rng.randrange(*TOKEN_IDS) for _ in range(length)] for _ in range(c)]


# ---- child: one engine -------------------------------------------------------------------------
def fake_round_ms(spec: str, c: int) -> float:
    """TEST ONLY: the fake engine's cost of one round, which the test expects to recover (auto: 1 ms over
    DFLASH's, whatever it verifies, so that the differential round time stays exact)."""
    kind, budget = config_key(spec)
    extra = 1.0 if budget == "auto" else budget / 32 if kind == "ddtree" else 0.0
    return 4.0 + 0.05 * c + (0.0 if kind == "plain" else 2.0) + extra


def fake_auto_budgets(c: int, rounds: int) -> list:
    """TEST ONLY: the budget each round of a fake ``ddtree:auto`` generate of c requests verifies: a mix of a
    wide, a narrower and the no-drafting budget, narrower at a larger batch (so tau(mean budget) is wrong)."""
    cycle = (63, 31, 0) if c < 4 else (15, 0, 0)
    return [cycle[r % len(cycle)] for r in range(rounds)]


class _FakeCollector:  # what export_auto_to_prometheus needs of upstream's SchedulerMetricsCollector
    labels = {"model_name": "fake"}


class _FakeEngine:
    """TEST ONLY (``BENCH_SHAPE_FAKE_ENGINE=1``): sleeps a fixed set-up plus ``fake_round_ms`` per round
    (accept length 2 for speculative configs) and writes a tiny trace, so the CPU test runs the orchestration.
    A ``ddtree:auto`` fake refuses to start without ``ACCEPT_TABLE_ENV`` and a Prometheus multiprocess dir, and
    exports its rounds' budgets (``fake_auto_budgets``) through the worker's own counter code. The config named
    by ``BENCH_SHAPE_FAKE_STALL_PROFILE`` hangs in its profile (the test of a run killed while profiling); with
    ``BENCH_SHAPE_FAKE_STALL_MEASURE=CONFIG@C`` that config hangs in its timed long generates (after the warm-up,
    more than the base tokens) at concurrency C (a run killed inside a repetition)."""

    def __init__(self, spec, base_tokens: int):
        self.spec, (self.kind, self.budget), self.base_tokens = spec, config_key(spec), base_tokens
        self.warmed_up = False  # set by the child after its warm-up
        if self.budget == "auto":  # as the real worker: widths.accept_model reads it at start
            table = os.environ.get(ACCEPT_TABLE_ENV)
            if not table or not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
                raise RuntimeError(f"fake {spec}: started without {ACCEPT_TABLE_ENV} or PROMETHEUS_MULTIPROC_DIR")
            self.table = json.loads(table)

    def generate(self, input_ids, sampling_params):
        m, c = sampling_params["max_new_tokens"], len(input_ids)
        if (os.environ.get("BENCH_SHAPE_FAKE_STALL_MEASURE") == f"{self.spec}@{c}" and self.warmed_up
                and m > self.base_tokens):
            time.sleep(600)
        rounds = m - 1 if self.kind == "plain" else math.ceil((m - 1) / 2)
        time.sleep(0.02 + 0.002 * c + rounds * fake_round_ms(self.spec, c) / 1000)
        meta = {"completion_tokens": m}
        if self.kind != "plain":
            meta["spec_verify_ct"] = rounds
        if self.budget == "auto":  # the real channel: the worker's AutoStats exported as at a decode-log step
            stats = AutoStats()
            for b in fake_auto_budgets(c, rounds):
                stats.add(b, c)
            export_auto_to_prometheus(_FakeCollector(), stats)
        return [{"output_ids": [7] * m, "meta_info": dict(meta)} for _ in range(c)]

    def start_profile(self, output_dir, **_):
        self.profile_dir = output_dir
        if os.environ.get("BENCH_SHAPE_FAKE_STALL_PROFILE") == self.spec:  # a run killed while profiling this one
            time.sleep(600)

    def stop_profile(self):
        name = "/x/python/sglang_ddtree/worker/worker.py(9): _decode_round"
        ev = [{"cat": "python_function", "ph": "X", "name": "/x/python/sglang/srt/s.py(1): event_loop", "ts": 0,
               "dur": 1000, "args": {"Python id": 1}}]
        for i in range(5):
            ev.append({"cat": "python_function", "ph": "X", "name": name, "ts": 100 + 100 * i, "dur": 80,
                       "args": {"Python id": 10 + i, "Python parent id": 1}})
            ev.append({"cat": "cuda_runtime", "ph": "X", "name": "cudaGraphLaunch", "ts": 105 + 100 * i, "dur": 2,
                       "args": {"correlation": 100 + i}})
            ev.append({"cat": "kernel", "ph": "X", "name": "k", "ts": 110 + 100 * i, "dur": 50,
                       "args": {"correlation": 100 + i}})
        os.makedirs(self.profile_dir, exist_ok=True)
        with open(os.path.join(self.profile_dir, "fake-TP-0.trace.json"), "w") as f:
            json.dump({"traceEvents": ev}, f)

    def shutdown(self):
        pass


def _measure(engine, spec: str, batch: list, max_new_tokens: int) -> dict:
    """One generate of ``batch`` at once: wall seconds, rounds (see the module docstring), tokens."""
    t = time.perf_counter()
    outs = engine.generate(input_ids=batch, sampling_params=dict(temperature=0.0, max_new_tokens=max_new_tokens,
                                                                 ignore_eos=True))
    wall = time.perf_counter() - t
    metas = [o["meta_info"] for o in outs]
    tokens = [m.get("completion_tokens", len(o["output_ids"])) for m, o in zip(metas, outs)]
    if config_key(spec)[0] == "plain":
        per_request = [n - 1 for n in tokens]  # the first token comes from the prefill
    elif all("spec_verify_ct" in m for m in metas):
        per_request = [m["spec_verify_ct"] for m in metas]
    else:
        raise RuntimeError(f"{spec}: meta_info has no spec_verify_ct, so its rounds cannot be counted")
    return {"wall_s": wall, "rounds": max(per_request), "rounds_sum": sum(per_request), "tokens": sum(tokens)}


def serve() -> int:
    """Child: reads its set-up as the first stdin line, then one JSON command per line; answers one
    ``_TAG`` line each."""
    setup = json.loads(sys.stdin.readline())
    spec, p = setup["spec"], setup["prompts"]
    prom_dir = None
    if setup["engine"].get("enable_metrics"):  # this engine's own dir (never one inherited and shared)
        prom_dir = os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="bench_shape_prom_")
    counted = is_auto(spec)
    if counted and prom_dir is None:
        raise RuntimeError(f"{spec}: ddtree:auto needs enable_metrics (its verified budgets are counted there)")
    if os.environ.get("BENCH_SHAPE_FAKE_ENGINE") == "1":
        engine = _FakeEngine(spec, setup["base_tokens"])
    else:
        import sglang

        engine = sglang.Engine(model_path=setup["target"], **setup["engine"])
    try:
        # warm-up: every batch size once, untimed, to the longest length a timed generate reaches (session 21: the
        # first timed long generate of budget auto at c 32 stalled ~0.75 s at its last round, after a warm-up of
        # base tokens only; a first-use compile at the new lengths is the suspect)
        for c in setup["concurrency"]:
            _measure(engine, spec, prompts(p["seed"], "warmup", c, p["length"]), setup["new_tokens"])
        if isinstance(engine, _FakeEngine):
            engine.warmed_up = True
        print(_TAG + json.dumps({"ready": True, "accept_table_env": os.environ.get(ACCEPT_TABLE_ENV),
                                 "prometheus_dir": prom_dir}), flush=True)
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["op"] == "quit":
                break
            c = cmd["c"]
            if cmd["op"] == "measure":
                ans, before = {}, settled_budget_rounds(prom_dir) if counted else None
                for m in (setup["base_tokens"], setup["new_tokens"]):
                    ans[str(m)] = _measure(engine, spec, prompts(p["seed"], f"{cmd['rep']}:{m}", c, p["length"]), m)
                    if counted:
                        after = settled_budget_rounds(prom_dir)
                        ans[str(m)]["budget_rounds"] = {str(b): n for b, n in count_diff(after, before).items()}
                        before = after
            else:  # profile
                engine.start_profile(output_dir=cmd["dir"], activities=["CPU", "GPU"], with_stack=True,
                                     record_shapes=False)
                _measure(engine, spec, prompts(p["seed"], "profile", c, p["length"]), setup["new_tokens"])
                engine.stop_profile()
                ans = {"dir": cmd["dir"]}
            print(_TAG + json.dumps(ans), flush=True)
    finally:
        engine.shutdown()
    return 0


class _Child:
    """One ``--serve`` process; its stdout is read by a thread, so a silent engine still times out."""

    def __init__(self, spec: str, setup: dict, log_path: str, env: dict):
        self.spec = spec
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1,
                                     env={**os.environ, **env})
        self.lines = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.proc.stdin.write(json.dumps(setup) + "\n")
        self.proc.stdin.flush()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def read(self, timeout_s: float) -> dict:
        deadline = time.time() + timeout_s
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.time()))
            except queue.Empty:
                raise TimeoutError(f"{self.spec}: no answer within {timeout_s} s; see {self.log.name}") from None
            if line is None:
                raise RuntimeError(f"{self.spec}: engine process exited (rc {self.proc.poll()}); see {self.log.name}")
            if line.startswith(_TAG):
                return json.loads(line[len(_TAG):])
            self.log.write(line)

    def ask(self, cmd: dict, timeout_s: float = 600) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.read(timeout_s)

    def close(self):
        try:
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)
        except Exception:  # already gone, or stuck: make sure it ends
            self.proc.kill()
        self.log.close()


# ---- parent: timing, report --------------------------------------------------------------------
def _stats(values) -> dict:
    return {"per_repetition": [round(v, 4) for v in values], "median": round(statistics.median(values), 4),
            "min": round(min(values), 4), "max": round(max(values), 4)}


def _round_ms(spec: str, c: int, ans: dict, args) -> dict:
    """Per-round ms and accept length of one measurement (the M1 generate minus the M0 one)."""
    m0, m1 = ans[str(args.base_tokens)], ans[str(args.new_tokens)]
    d_rounds = m1["rounds"] - m0["rounds"]
    if d_rounds <= 0:
        raise RuntimeError(f"{spec} c {c}: rounds did not grow from {args.base_tokens} to {args.new_tokens} new "
                           f"tokens ({m0['rounds']} -> {m1['rounds']}); raise --new-tokens")
    out = {"round_ms": (m1["wall_s"] - m0["wall_s"]) / d_rounds * 1000, "rounds": [m0["rounds"], m1["rounds"]],
           "accept_length": m1["tokens"] / m1["rounds_sum"]}
    if "budget_rounds" in m1:  # ddtree:auto: the verified budgets of the window (both generates)
        window = {}
        for m in (m0, m1):
            for b, n in m["budget_rounds"].items():
                window[parse_bucket(b)] = window.get(parse_bucket(b), 0) + n
        out.update(budget_rounds={str(b): window[b] for b in sorted(window)},
                   budget_rounds_by_generate={str(args.base_tokens): m0["budget_rounds"],
                                              str(args.new_tokens): m1["budget_rounds"]},
                   budget_rounds_counted=sum(window.values()), rounds_run=m0["rounds"] + m1["rounds"])
    return out


def _analyze_profile(out_dir: str, depth: int = 3) -> dict:
    """``analyze_trace.analyze`` of the newest trace under ``out_dir`` (call tree ``depth`` levels deep): the whole
    dict goes next to the trace as ``<trace>.analysis.json``; returned without its call_tree / loop_tree lists."""
    from analyze_trace import analyze, load

    traces = sorted((p for p in glob.glob(os.path.join(out_dir, "*.trace.json*")) if not p.endswith(".analysis.json")),
                    key=os.path.getmtime)
    if not traces:
        return {"error": f"no *.trace.json* file in {out_dir}"}
    full = analyze(load(traces[-1]), depth=depth)
    with open(traces[-1] + ".analysis.json", "w") as f:
        json.dump(full, f, indent=1)
    return {"trace": traces[-1], **{k: v for k, v in full.items() if k not in ("call_tree", "loop_tree")}}


# A round verifies at least one token per request with a full target forward, so it cannot take less than the
# autoregressive step at the same concurrency; a repetition measured below FLOOR x that step (same repetition)
# had a stall inside its shorter (M0) generate, which the M1 - M0 differential turns into a too-short round (seen
# on the H200: 0.95 ms against a 5.2 ms plain step). Such repetitions are listed and left out of every statistic.
FLOOR = 0.5


def invalid_repetitions(runs: dict, spec: str, c) -> dict:
    """{repetition: reason} for ``spec``'s repetitions at ``c`` below ``FLOOR`` x a plain config's round in the
    same repetition (no plain config measured: none)."""
    plain = next((s for s in runs if s.split("+")[0] == "plain" and c in runs[s]), None)
    if plain is None or plain == spec:
        return {}
    bad = {}
    for rep, (m, p) in enumerate(zip(runs[spec][c], runs[plain][c])):
        if m["round_ms"] < FLOOR * p["round_ms"]:
            bad[rep] = (f"{m['round_ms']:.3f} ms/round < {FLOOR} x {plain}'s {p['round_ms']:.3f} in the same "
                        f"repetition: a stall in the base generate (left out)")
    return bad


def summarize(runs: dict, table: dict, baselines: list) -> tuple[dict, dict]:
    """runs[spec][c] = list of ``_round_ms`` per repetition -> (results[spec][c], best projected per c).
    Repetitions ``invalid_repetitions`` names (of the config or of a baseline it is compared with) are left out
    of the statistics and listed under ``invalid_repetitions``."""
    res, best = {}, {}
    invalid = {(spec, c): invalid_repetitions(runs, spec, c) for spec, by_c in runs.items() for c in by_c}
    for spec, by_c in runs.items():
        for c, all_ms in by_c.items():
            bad = invalid[(spec, c)]
            ms = [m for rep, m in enumerate(all_ms) if rep not in bad]
            rec = res.setdefault(spec, {})[str(c)] = {"round_ms": [round(m["round_ms"], 4) for m in all_ms]}
            if all("loadavg_1m" in m for m in all_ms):
                rec["loadavg_1m"] = [m["loadavg_1m"] for m in all_ms]
            if all("gpu" in m for m in all_ms):  # per repetition, as round_ms
                rec["gpu"] = [m["gpu"] for m in all_ms]
            if bad:
                rec["invalid_repetitions"] = {str(rep): why for rep, why in bad.items()}
            if not ms:
                rec["round_ms_median"] = None
                continue
            rms = [m["round_ms"] for m in ms]
            med = statistics.median(rms)
            rec.update({
                "round_ms_median": round(med, 4),
                "round_ms_min": round(min(rms), 4), "round_ms_max": round(max(rms), 4),
                "rounds": [m["rounds"] for m in ms],
                "accept_length_observed": round(statistics.median(m["accept_length"] for m in ms), 4)})
            if is_auto(spec):
                auto = auto_record(ms, table)
                tau, how, taus = auto.pop("tau"), auto.pop("tau_source"), auto["tau_per_repetition"]
                rec.update(auto)
            else:
                tau, how = projected_tau(spec, table)
                taus = [tau] * len(rms)
            tau_by_rep = dict(zip((rep for rep in range(len(all_ms)) if rep not in bad), taus))
            rec.update(tau=tau and round(tau, 4), tau_source=how,
                       projected_tokens_per_s=round(c * tau / med * 1000, 1) if tau else None)
            for base in baselines:
                if base == spec:
                    continue
                # pairs of the same repetition, both valid
                pairs = [(tau_by_rep[rep], m["round_ms"], b["round_ms"])
                         for rep, (m, b) in enumerate(zip(all_ms, runs[base][c]))
                         if rep in tau_by_rep and rep not in invalid[(base, c)]]
                if not pairs:
                    continue
                rec[f"round_ms_ratio_vs_{base}"] = _stats([x / b for _, x, b in pairs])
                b_tau = projected_tau(base, table)[0]  # a baseline is plain, DFLASH or a fixed budget
                if tau and b_tau:
                    rec[f"projected_speedup_vs_{base}"] = _stats([(t / x) / (b_tau / b) for t, x, b in pairs])
            if rec["projected_tokens_per_s"] and rec["projected_tokens_per_s"] > best.get(str(c), {}).get(
                    "projected_tokens_per_s", 0):
                best[str(c)] = {"config": spec, "projected_tokens_per_s": rec["projected_tokens_per_s"]}
    return res, best


def engine_settings(args) -> dict:
    """The ``sglang.Engine`` arguments every config shares (before its port and ``engine_kwargs``)."""
    return dict(dtype="bfloat16", sampling_backend="pytorch", context_length=CONTEXT_LENGTH,
                max_total_tokens=args.max_total_tokens, mem_fraction_static=args.mem_fraction,
                cuda_graph_max_bs_decode=max(args.concurrency), log_level="error", load_format="dummy",
                # every engine runs the largest concurrency at once: unset, upstream's speculative handlers (DFLASH's,
                # which DDTREE's validation calls) reset it to 48, so at c 64 a speculative engine ran 48 requests and
                # then the other 16 (session 39 found it in the engines' logged server args; AR was not capped)
                max_running_requests=max(args.concurrency),
                skip_tokenizer_init=True,
                # every engine stays alive while another is timed: without it each idle scheduler polls its
                # sockets in a busy loop, one CPU core each, next to the CPU-bound round being measured
                sleep_on_idle=True,
                # prefill graphs only cost start time here (the M1 - M0 differential cancels prefill): on the
                # H200 the first engine spent 90 s compiling them for 38 token counts
                cuda_graph_backend_prefill="disabled",
                **(BUDGET_COUNT_SETTINGS if any(is_auto(s) for s in args.configs) else {}))


# A hybrid shape's engines, every config alike (paired): text only (SGLang would otherwise load the Qwen3.5
# multimodal processor, which needs processor and tokenizer files a dummy-weight shape does not have), no radix
# cache (DDTREE on a hybrid target needs a mamba scheduler strategy with it; the benchmark never shares prefixes),
# and at most the largest concurrency running: SGLang sizes the recurrent-state pool from max_running_requests
# without the radix cache, and from the free memory (half of it) when that is unset. Session 25: the plain engine
# took 69.8 GiB that way and DFLASH 63.8 GiB (48 requests x 16 rows of per-step states), so the third engine of
# four could not start on one H200.
HYBRID_ENGINE_SETTINGS = {"enable_multimodal": False, "disable_radix_cache": True}


def shape_settings(shape: str, spec: str, max_concurrency: int) -> tuple[dict, dict]:
    """(engine kwargs, environment) a shape adds to every config: a hybrid shape's text-only, radix-free engines
    running at most ``max_concurrency`` requests, and DDTREE's experimental hybrid switch (``ddtree:auto`` where its
    largest bucket's per-row states fit: DDTREE's validation refuses it with the numbers where they do not)."""
    if shape not in HYBRID_SHAPES:
        return {}, {}
    return ({**HYBRID_ENGINE_SETTINGS, "max_running_requests": int(max_concurrency)},
            {HYBRID_ENV: "1"} if spec.startswith("ddtree") else {})


def run_shape(shape: str, target_dir: str, draft_dir: str, args, port_index: int, log_dir: str,
              on_repetition=None) -> tuple[dict, dict, dict]:
    """All engines of one shape alive together; returns (results[config][c], best projected config per c,
    engines[config]: its environment, start + warm-up seconds and what its process saw).
    ``on_repetition(results, best, engines, repetitions done)`` gets the summary so far after each measurement
    (a killed run keeps them)."""
    configs, engine = args.configs, engine_settings(args)
    t0, children, runs, profiles = time.time(), {}, {s: {c: [] for c in args.concurrency} for s in configs}, {}
    engines = {}  # config: its environment, start + warm-up seconds, what its process saw
    try:
        for i, spec in enumerate(configs):  # one after another: each engine sizes itself from the free memory
            t_start = time.time()
            port = args.base_port + 100 * (port_index + i)
            shape_engine, shape_env = shape_settings(shape, spec, max(args.concurrency))
            spec_kwargs = engine_kwargs(spec, draft_dir, args.attention_backend)
            setup = {"spec": spec, "target": target_dir, "concurrency": args.concurrency,
                     "base_tokens": args.base_tokens, "new_tokens": args.new_tokens,
                     "prompts": {"seed": args.seed, "length": args.prompt_len},
                     "engine": {**engine, "port": port, "nccl_port": port + 7,
                                **spec_kwargs, **shape_engine, **draft_load_settings(args.draft_weights, spec_kwargs),
                                # budget auto's start-up cost table and per-interval choices are INFO lines:
                                # its engine log (--log-dir) keeps them
                                **({"log_level": "info"} if is_auto(spec) else {})}}
            env = {**config_env(spec, args.table), **shape_env}
            children[spec] = _Child(spec, setup, os.path.join(log_dir, f"engine_{shape}_{i}.log"), env)
            ready = children[spec].read(args.start_timeout_s)
            engines[spec] = {"env": env, "start_and_warmup_s": round(time.time() - t_start, 1),
                             "accept_table_env_seen": ready.get("accept_table_env"),
                             "prometheus_dir": ready.get("prometheus_dir")}
            print(f"[bench_shape] {shape} {spec} ready ({time.time() - t0:.0f} s)", flush=True)
        for rep in range(args.repeats):
            order = [(c, spec) for c in args.concurrency
                     for spec in configs[rep % len(configs):] + configs[: rep % len(configs)]]
            for k, (c, spec) in enumerate(order):
                # the GPU's SM clock, power and throttle reasons during the measurement (gpu_clocks: same
                # kernels 7-11 % slower in one config than in another of the same run, sessions 17-18)
                with GpuSampler(every_s=0.5) as gpu:  # nvidia-smi costs CPU: twice a second
                    answer = children[spec].ask({"op": "measure", "c": c, "rep": rep})
                m = _round_ms(spec, c, answer, args)
                m["gpu"] = gpu.summary()
                # the host's 1-minute load average after each measurement: a CPU-bound round is slowed by other
                # busy threads on the machine (session 18: every function of one engine's round 1.3-1.7x slower)
                m["loadavg_1m"] = round(os.getloadavg()[0], 2)
                runs[spec][c].append(m)
                print(f"[bench_shape] {shape} rep {rep + 1}/{args.repeats} c {c:>3} {spec:>22}: "
                      f"{m['round_ms']:8.3f} ms/round (rounds {m['rounds'][0]} -> {m['rounds'][1]}, "
                      f"accept {m['accept_length']:.2f}{_budgets_note(m)}{_gpu_note(m['gpu'])})", flush=True)
                # after every measurement, not every repetition: session 17's cold engines left one repetition
                # too little time to finish, and the killed run kept none of its measurements
                if on_repetition is not None:
                    on_repetition(*summarize(runs, args.table, args.baselines), engines, rep + (k + 1 == len(order)))
        for spec in configs if args.profile_dir else ():
            for c in args.profile_concurrency:
                d = os.path.join(os.path.abspath(args.profile_dir), shape, spec.replace(":", "_").replace("+", "_"),
                                 f"c{c}")
                with GpuSampler(every_s=0.5) as gpu:  # nvidia-smi costs CPU: twice a second
                    d = children[spec].ask({"op": "profile", "c": c, "dir": d})["dir"]
                # analysed at once and handed on with the summary, so a run killed before the last profile keeps
                # the breakdowns it took (session 16's close call ran out of time while profiling)
                profiles[spec, c] = {**_analyze_profile(d, args.profile_depth), "gpu": gpu.summary()}
                if on_repetition is not None:
                    results, best = summarize(runs, args.table, args.baselines)
                    on_repetition(_with_profiles(results, profiles), best, engines, args.repeats)
    finally:
        for child in children.values():
            child.close()
    results, best = summarize(runs, args.table, args.baselines)
    _with_profiles(results, profiles)
    for spec, c in profiles:
        m = results[spec][str(c)]
        if m.get("outside_graphs_ms") is not None:
            print(f"[bench_shape] {shape} c {c:>3} {spec:>22}: {m['outside_graphs_ms']:.2f} ms of the round outside "
                  f"its CUDA graphs ({100 * m['outside_graphs_fraction']:.0f} %)", flush=True)
    print(f"[bench_shape] {shape} done ({time.time() - t0:.0f} s)", flush=True)
    return results, best, engines


def _with_profiles(results: dict, profiles: dict) -> dict:
    """``results`` with each analysed profile ({(config, c): analysis}) and the time outside the graphs it gives
    written into that config's entry at that concurrency (in place; returned for chaining)."""
    for (spec, c), profile in profiles.items():
        m = results[spec][str(c)]
        m["profile"] = profile
        m.update(outside_graphs(m["round_ms_median"], profile))
    return results


def _gpu_note(gpu: dict) -> str:
    if gpu.get("sm_mhz_median") is None:
        return ""
    throttle = ",".join(gpu.get("throttle") or []) or "none"
    return f", SM {gpu['sm_mhz_median']:.0f} MHz, {gpu.get('power_w_median', float('nan')):.0f} W, throttle {throttle}"


def _budgets_note(m: dict) -> str:
    if m.get("budget_rounds") is None:
        return ""
    dist = " ".join(f"{b}:{n}" for b, n in m["budget_rounds"].items()) or "none"
    return f", budgets {dist} ({m['budget_rounds_counted']} of {m['rounds_run']} rounds counted)"


def outside_graphs(round_ms: float, profile: dict) -> dict:
    """The part of a round spent outside its CUDA graphs (the draft and target forwards): the unprofiled
    median round minus the GPU time of the graph-replayed work in the profiled rounds (kernel times, which
    the profiler does not inflate as it does CPU times). {} without a usable profile."""
    graph_us = (profile or {}).get("graph_gpu_us_per_round")
    if graph_us is None or not round_ms:
        return {}
    outside = round_ms - graph_us / 1000.0
    return {"graphs_gpu_ms": round(graph_us / 1000.0, 3), "outside_graphs_ms": round(outside, 3),
            "outside_graphs_fraction": round(outside / round_ms, 4)}


def _print_table(shape: str, results: dict, best: dict, concurrency: list) -> None:
    print(f"[bench_shape] {shape}: median ms/round | projected tok/s", flush=True)
    print(f"{'config':>24} " + " ".join(f"{'c=' + str(c):>18}" for c in concurrency))
    for spec, by_c in results.items():
        cells = []
        for c in map(str, concurrency):
            tps, med = by_c[c].get("projected_tokens_per_s"), by_c[c]["round_ms_median"]
            cells.append(f"{'-' if med is None else f'{med:.2f}':>8} |{'-' if tps is None else f'{tps:.0f}':>7}")
        print(f"{spec:>24} " + " ".join(f"{x:>18}" for x in cells))
    print("  best projected: " + ", ".join(f"c={c} {b['config']} ({b['projected_tokens_per_s']:.0f} tok/s)"
                                           for c, b in best.items()), flush=True)
    for spec, by_c in results.items():
        for c in map(str, concurrency):
            if "budget_rounds" in by_c[c]:
                m = by_c[c]
                dist = " ".join(f"{b}:{n}" for b, n in m["budget_rounds"].items()) or "none"
                tau = "-" if m["tau"] is None else f"{m['tau']:.2f}"
                print(f"  {spec} c={c}: verified budgets {dist} (mean {m['budget_mean']}), tau {tau}", flush=True)
    notes = {f"tau {s}: {m['tau_source']}" for s, by_c in results.items() for m in by_c.values()
             if m.get("tau_source", "table") != "table" and "budget_rounds" not in m}
    notes |= {f"invalid: {s} c={c} repetition {r}: {why}" for s, by_c in results.items() for c, m in by_c.items()
              for r, why in m.get("invalid_repetitions", {}).items()}
    for note in sorted(notes):
        print(f"  {note}", flush=True)


def _load_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def merge_results(reports: list) -> dict:
    """The ``results`` of several reports as one {shape: {config: {c: measurement}}} (e.g. the concurrency
    levels 1-8 and 16-64 of two device calls); a (shape, config, c) measured in two reports is an error, since
    a plot can show only one of them."""
    merged: dict = {}
    for report in reports:
        for shape, by_spec in report["results"].items():
            for spec, by_c in by_spec.items():
                into = merged.setdefault(shape, {}).setdefault(spec, {})
                twice = sorted(set(into) & set(by_c), key=int)
                if twice:
                    raise ValueError(f"{shape} {spec}: concurrency {', '.join(twice)} is in two reports")
                into.update(by_c)
    return merged


def plot(json_in: str, plot_dir: str) -> int:
    """PNGs per shape from one report, or several comma-separated ones whose measurements do not overlap
    (``merge_results``): projected tok/s and ms/round vs concurrency; with a ``ddtree:auto`` config also
    ``chosen_budget_<shape>.png``: projected tok/s (left) next to auto's verified budget per round vs concurrency
    (right: the mean, and the distribution as one marker per budget, its area the share of rounds; the budget
    axis in log2(budget + 1), so every bucket 2^k - 1 is one step)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    report = {"results": merge_results([_load_json(p) for p in json_in.split(",")])}
    os.makedirs(plot_dir, exist_ok=True)
    panels = (("projected_tokens_per_s", "projected tokens/s (c * tau / round)", "projected_tokens_per_s"),
              ("round_ms", "ms per round (median, min-max)", "round_ms_median"))

    def save(fig, name, shape):
        path = os.path.join(plot_dir, f"{name}_{shape}.png")
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        print(f"[bench_shape] wrote {path}", flush=True)

    for shape, results in report["results"].items():
        for name, ylabel, key in panels:
            fig, ax = plt.subplots(figsize=(7, 4.5))
            if _plot_lines(ax, results, key, ylabel, shape, errorbars=name == "round_ms"):
                save(fig, name, shape)
            plt.close(fig)
        auto = {spec: sorted((int(c), m) for c, m in by_c.items() if m.get("budget_rounds"))
                for spec, by_c in results.items() if is_auto(spec)}
        auto = {spec: pts for spec, pts in auto.items() if pts}
        if not auto:
            continue
        fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
        _plot_lines(left, results, "projected_tokens_per_s", panels[0][1], shape)
        for k, (spec, pts) in enumerate(auto.items()):
            xs = [c for c, _ in pts]
            line, = right.plot(xs, [m["budget_mean"] for _, m in pts], marker="o", label=f"{spec}: mean budget")
            for c, m in pts:
                total = sum(m["budget_rounds"].values())
                bs = [int(parse_bucket(b)) for b in m["budget_rounds"]]  # the chain at its width
                shares = [n / total for n in m["budget_rounds"].values()]
                right.scatter([c * 2 ** (0.06 * k)] * len(bs), bs, s=[300 * x for x in shares], alpha=0.35,
                              color=line.get_color())
        right.scatter([], [], s=60, color="gray", alpha=0.35, label="rounds at a budget (area = share)")
        ticks = sorted({c for pts in auto.values() for c, _ in pts})
        right.set_xscale("log", base=2)
        right.set_xticks(ticks, [str(c) for c in ticks])
        right.set_yscale("function", functions=(lambda y: np.log2(np.maximum(y, 0) + 1), lambda y: 2.0 ** y - 1))
        right.set_yticks(AUTO_BUCKETS)
        right.set(xlabel="concurrency (requests decoded at once)", ylabel="verified budget per round (0 = no drafting)",
                  title=f"{shape}: ddtree:auto's chosen budget")
        right.grid(alpha=0.3)
        right.legend(fontsize=8)
        save(fig, "chosen_budget", shape)
    return 0


def _plot_lines(ax, results: dict, key: str, ylabel: str, shape: str, errorbars: bool = False) -> bool:
    """One line per config of ``results[config][c][key]`` vs concurrency on ``ax``; False when none has it."""
    lines = {spec: sorted((int(c), m) for c, m in by_c.items() if m.get(key) is not None)
             for spec, by_c in results.items()}
    lines = {s: pts for s, pts in lines.items() if pts}
    if not lines:
        return False
    for spec, pts in lines.items():
        xs, ys = [c for c, _ in pts], [m[key] for _, m in pts]
        if errorbars:
            err = [[y - m["round_ms_min"] for y, (_, m) in zip(ys, pts)],
                   [m["round_ms_max"] - y for y, (_, m) in zip(ys, pts)]]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=spec)
        else:
            ax.plot(xs, ys, marker="o", label=spec)
    ticks = sorted({c for pts in lines.values() for c, _ in pts})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(c) for c in ticks])
    ax.set(xlabel="concurrency (requests decoded at once)", ylabel=ylabel, title=f"{shape}: {ylabel}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return True


def _int_list(ap, flag: str, value: str) -> list:
    try:
        out = [int(x) for x in value.split(",")]
    except ValueError:
        out = []
    if not out or min(out) < 1:
        ap.error(f"{flag} {value!r}: want comma-separated positive integers")
    return out


def _check(ap, args) -> None:
    """Every argument error, before any engine starts; fills args.configs / baselines / table."""
    args.shapes = args.shapes.split(",")
    bad = [s for s in args.shapes if s not in SHAPE_NAMES]
    if bad:
        ap.error(f"--shapes {bad}: unknown; use one or more of {SHAPE_NAMES}")
    args.configs = args.configs.split(",")
    if len(set(args.configs)) != len(args.configs):
        ap.error(f"--configs {args.configs}: a config appears twice")
    for spec in args.configs:
        try:
            engine_kwargs(spec, "D", args.attention_backend)
        except ValueError as e:
            ap.error(f"--configs: {e}")
    if args.baselines is None:
        args.baselines = [s for s in args.configs if config_key(s)[0] == "dflash"][:1] + \
            [s for s in args.configs if s == "plain"]
    else:
        args.baselines = [b for b in args.baselines.split(",") if b]
        missing = [b for b in args.baselines if b not in args.configs]
        if missing:
            ap.error(f"--baselines {missing} are not in --configs {args.configs}")
    args.concurrency = _int_list(ap, "--concurrency", args.concurrency)
    args.profile_concurrency = _int_list(ap, "--profile-concurrency", args.profile_concurrency)
    if args.profile_dir and not set(args.profile_concurrency) <= set(args.concurrency):
        ap.error(f"--profile-concurrency {args.profile_concurrency}: each must be in --concurrency {args.concurrency}")
    for flag, value, low in (("--repeats", args.repeats, 1), ("--base-tokens", args.base_tokens, 1),
                             ("--prompt-len", args.prompt_len, 1), ("--profile-depth", args.profile_depth, 1)):
        if value < low:
            ap.error(f"{flag} {value}: must be at least {low}")
    if args.new_tokens <= args.base_tokens:
        ap.error(f"--new-tokens {args.new_tokens}: must be larger than --base-tokens {args.base_tokens}")
    if args.prompt_len + args.new_tokens + DRAFT_BLOCK > CONTEXT_LENGTH:
        ap.error(f"--prompt-len {args.prompt_len} + --new-tokens {args.new_tokens}: must leave a draft block "
                 f"({DRAFT_BLOCK}) of the context length {CONTEXT_LENGTH}")
    if args.start_timeout_s <= 0:
        ap.error(f"--start-timeout-s {args.start_timeout_s}: must be positive")
    if not 0 < args.mem_fraction < 1:
        ap.error(f"--mem-fraction {args.mem_fraction}: must be in (0, 1)")
    try:
        args.table = load_accept_table(args.accept_table) if args.accept_table else PAPER_ACCEPT
    except (OSError, ValueError) as e:
        ap.error(str(e))
    # Every DDTREE budget below the table (auto's buckets, fixed budgets) gets the one stated assumption, whatever
    # else runs: until session 27 a fixed budget 15 was clamped to the table's 8.61 unless an auto config ran
    # beside it, and then got DFLASH's chain (7.79), so one config's projection depended on the others.
    has_auto = any(is_auto(s) for s in args.configs)
    small = set(AUTO_BUCKETS) if has_auto else set()
    small |= {b for k, b in map(config_key, args.configs) if k == "ddtree" and isinstance(b, int)}
    args.table = with_small_budgets(args.table, sorted(small))
    if has_auto:  # auto on fa3 may verify the chain bucket: DFLASH's draft and tau
        args.table = with_chain_bucket(args.table)
    if "assumed" in args.table:
        print(f"[bench_shape] ddtree budgets {args.table['assumed']['budgets']} lie below the accept table: "
              f"assumed {args.table['assumed']['rule']}: " + ", ".join(
                  f"{b}: {args.table['ddtree'][str(b)]}" for b in args.table["assumed"]["budgets"]), flush=True)
    for spec in args.configs:  # an estimate: prompt + new tokens + the verified block or tree per request
        kind, budget = config_key(spec)
        tree = budget + 1 if isinstance(budget, int) else AUTO_MAX_BUDGET + 1  # auto: its largest bucket
        extra = {"plain": 0, "dflash": DRAFT_BLOCK}.get(kind, tree)
        need = max(args.concurrency) * (args.prompt_len + args.new_tokens + extra)
        if need > args.max_total_tokens:
            print(f"[bench_shape] warning: {spec} at c {max(args.concurrency)} needs about {need} KV slots, more "
                  f"than --max-total-tokens {args.max_total_tokens}: requests may queue", flush=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="report JSON (required unless --plot)")
    ap.add_argument("--shapes", default="qwen3-8b", help=f"comma-separated, of {SHAPE_NAMES}")
    ap.add_argument("--configs", default="plain,dflash,ddtree:16:8,ddtree:64:8")
    ap.add_argument("--baselines", help="paired ratios against these configs (default: the first dflash config "
                    "and plain)")
    ap.add_argument("--concurrency", default="1,2,4,8,16,32,64", help="requests decoded at once, comma-separated")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=64, help="M1: new tokens of the long generate")
    ap.add_argument("--base-tokens", type=int, default=16, help="M0: new tokens of the short generate")
    ap.add_argument("--prompt-len", type=int, default=128, help="random prompt token ids per request")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random prompts")
    ap.add_argument("--max-total-tokens", type=int, default=40000, help="KV pool cap of EACH engine")
    ap.add_argument("--mem-fraction", type=float, default=0.88, help="mem_fraction_static of EACH engine")
    ap.add_argument("--attention-backend", default="triton", choices=ATTENTION_BACKENDS,
                    help="of every config without its own +fa3 / +triton / +flashinfer")
    ap.add_argument("--draft-weights", default="dummy", choices=DRAFT_WEIGHTS,
                    help="the drafter's weights: dummy (SGLang's, like the target's: DFLASH then drafts one repeated "
                         "token) or normal (a written checkpoint, N(0, 0.02) matrices: varied drafts like a real "
                         "drafter's; 2.1 GB at the 8B shape)")
    ap.add_argument("--accept-table", help="JSON accept lengths for the projection (default: the DDTree paper's)")
    ap.add_argument("--model-dir", help="where the shapes' config dirs are written (default: a temp dir)")
    ap.add_argument("--start-timeout-s", type=float, default=600)
    ap.add_argument("--base-port", type=int, default=32000)
    ap.add_argument("--log-dir", help="engine logs (default: next to --out)")
    ap.add_argument("--profile-dir", help="after timing, one torch-profiler trace per config and "
                    "--profile-concurrency under this directory, analysed with analyze_trace.py")
    ap.add_argument("--profile-concurrency", default="1,32")
    ap.add_argument("--profile-depth", type=int, default=3,
                    help="levels of the analysed call tree under the round (analyze_trace.py --depth)")
    ap.add_argument("--plot", metavar="JSON_IN", help="no engines: plot a report written by this script "
                    "(or several, comma-separated, that measured different concurrency levels)")
    ap.add_argument("--plot-dir", help="where --plot writes its PNGs")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        return serve()
    if bool(args.plot) != bool(args.plot_dir):
        ap.error("--plot JSON_IN and --plot-dir DIR go together")
    if args.plot:
        if importlib.util.find_spec("matplotlib") is None:
            ap.error("--plot needs matplotlib (scripts/requirements-cpu.txt pins matplotlib==3.10.8)")
        try:
            return plot(args.plot, args.plot_dir)
        except ValueError as e:
            ap.error(f"--plot {args.plot}: {e}")
    if not args.out:
        ap.error("--out is required (or --plot JSON_IN --plot-dir DIR)")
    _check(ap, args)
    why = None if os.environ.get("BENCH_SHAPE_FAKE_ENGINE") == "1" else fa3_unavailable(args.configs,
                                                                                        args.attention_backend)
    if why:
        print(f"bench_shape: error: {why}", file=sys.stderr)
        return 1
    args.model_dir = args.model_dir or tempfile.mkdtemp(prefix="bench_shape_")
    log_dir = args.log_dir or os.path.dirname(os.path.abspath(args.out))
    os.makedirs(log_dir, exist_ok=True)
    report = {"command": shlex.join([os.path.basename(sys.executable), sys.argv[0], *argv]),
              "environment": environment(argv),
              "settings": {"new_tokens": args.new_tokens, "base_tokens": args.base_tokens,
                           "prompt_len": args.prompt_len, "prompt_token_ids": list(TOKEN_IDS), "seed": args.seed,
                           "concurrency": args.concurrency, "repeats": args.repeats, "configs": args.configs,
                           "baselines": args.baselines, "attention_backend": args.attention_backend,
                           "draft_weights": args.draft_weights,
                           "engine": engine_settings(args), "greedy": True, "ignore_eos": True, "model_dir": args.model_dir,
                           "fake_engine": os.environ.get("BENCH_SHAPE_FAKE_ENGINE") == "1",
                           "method": "one engine process per config, all alive on one GPU; repetition r runs every "
                                     "concurrency, each with every config in an order rotated by r; round ms = "
                                     "(wall(M1) - wall(M0)) / (rounds(M1) - rounds(M0))"},
              "shapes": {}, "accept_table": args.table, "results": {}, "best_projected": {}, "engines": {},
              "errors": {}}
    total_gib = gpu_total_gib()
    for i, shape in enumerate(args.shapes):
        short = memory_shortfall(shape, args.configs, args.max_total_tokens, total_gib, max(args.concurrency),
                                 args.attention_backend)
        if short is not None:
            report["errors"][shape] = {"error": f"MemoryError: {short}"}
            print(f"[bench_shape] {shape}: {short}", flush=True)
            with open(args.out, "w") as f:
                json.dump(report, f, indent=1)
            continue
        target, draft = shape_configs(shape)
        target_dir, draft_dir = write_shape(args.model_dir, shape, args.draft_weights)
        report["shapes"][shape] = {"target": target, "draft": draft, "target_dir": target_dir, "draft_dir": draft_dir}
        def partial(results, best, engines, done, shape=shape):  # the JSON so far, in case the run is killed
            report["results"][shape], report["best_projected"][shape], report["engines"][shape] = results, best, engines
            report["partial"] = {"shape": shape, "repetitions_done": done}
            with open(args.out, "w") as f:
                json.dump(report, f, indent=1)

        try:
            report["results"][shape], report["best_projected"][shape], report["engines"][shape] = run_shape(
                shape, target_dir, draft_dir, args, i * len(args.configs), log_dir, on_repetition=partial)
            report.pop("partial", None)
        except Exception as e:  # record, and go on with the next shape
            import traceback

            report["errors"][shape] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
            print(f"[bench_shape] {shape}: {report['errors'][shape]['error']}", flush=True)
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    for shape, results in report["results"].items():
        _print_table(shape, results, report["best_projected"][shape], args.concurrency)
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
