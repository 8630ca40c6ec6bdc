#!/usr/bin/env python3
"""Train the tiny Qwen3 target + DFlash drafter pair shipped in ``sglang_ddtree.fixtures``.

Stages (each one resumable from ``--work``; a finished stage is skipped on a re-run):
  corpus    the .py files of the running interpreter's standard library (built at run time, never
            committed), split into train / held-out files by a hash of their path;
  tokenizer byte-level BPE (``tokenizers``) with ``<|endoftext|>`` and DFlash's ``<|MASK|>``;
  target    a small ``Qwen3ForCausalLM`` (transformers), warmup-stable-decay LR: the stable phase
            ends when the validation loss plateaus (or at a step / time cap), then a short decay;
  distill   the target's own greedy continuations of corpus prompts (the drafter's training text);
  draft     a DFlash drafter (SGLang 0.5.16 checkpoint format, ``sglang_ddtree.reference.dflash``)
            trained with the block-diffusion objective on that text: block = [anchor, MASK x (L-1)],
            context = target features of the tokens before the anchor, loss = CE against the
            target's greedy tokens, weighted by DFlash's decay over block positions;
  eval      mean accept length (tokens per round, bonus included) of DFLASH and DDTree on held-out
            prompts with the reference loop;
  export    ``--out``/{target,draft}/ (bf16 safetensors + tokenizer) and ``summary.json``.

    python scripts/train_tiny_pair.py --device cuda --work /tmp/tp --out /tmp/tp/pair
    python scripts/train_tiny_pair.py --quick --device cpu --work /tmp/tpq   # CPU smoke test
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import sysconfig
import time

import torch
import torch.nn.functional as F

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
try:
    import sglang_ddtree  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(_REPO, "python"))

from sglang_ddtree.reference.dflash import DFlashConfig, DFlashDraftModel, dflash_loss, training_blocks  # noqa: E402
from sglang_ddtree.reference.qwen3 import KVCache  # noqa: E402
from sglang_ddtree.reference.qwen3 import Qwen3ForCausalLM as RefQwen3  # noqa: E402

try:
    from tqdm.auto import tqdm
except ImportError:  # the progress bar is a nicety
    tqdm = None

EOS, MASK = "<|endoftext|>", "<|MASK|>"
MAX_PAIR_BYTES = 10_000_000


# ---------------------------------------------------------------- helpers
class Log:
    """One JSON object per line in <work>/train_log.jsonl (appended across resumes) + stdout."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self, **rec):
        rec = {"time": round(time.time(), 1), **rec}
        with open(self.path, "a") as f:
            f.write(json.dumps(rec) + "\n")
        msg = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in rec.items() if k != "time")
        (tqdm.write if tqdm else print)(msg)


def progress(total: int, initial: int, desc: str):
    if tqdm is None:
        return None
    return tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True, mininterval=2.0)


def atomic_save(obj, path: str) -> None:
    torch.save(obj, path + ".tmp")
    os.replace(path + ".tmp", path)


def write_json(obj, path: str) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(path + ".tmp", path)


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


class WSD:
    """Warmup-stable-decay learning rate: linear warmup, constant, then linear decay to ``min_ratio``.
    The decay starts when ``start_decay`` is called (plateau, step cap or time cap)."""

    def __init__(self, lr: float, warmup: int, min_ratio: float = 0.0):
        self.lr, self.warmup, self.min_ratio = lr, warmup, min_ratio
        self.decay_start = self.decay_len = None
        self.reason = None

    def start_decay(self, step: int, length: int, reason: str) -> None:
        if self.decay_start is None:
            self.decay_start, self.decay_len, self.reason = step, max(1, length), reason

    def done(self, step: int) -> bool:
        return self.decay_start is not None and step >= self.decay_start + self.decay_len

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        if self.decay_start is None or step < self.decay_start:
            return self.lr
        frac = min(1.0, (step - self.decay_start) / self.decay_len)
        return self.lr * (1.0 - frac * (1.0 - self.min_ratio))

    def state_dict(self):
        return {"decay_start": self.decay_start, "decay_len": self.decay_len, "reason": self.reason}

    def load_state_dict(self, d):
        self.decay_start, self.decay_len, self.reason = d["decay_start"], d["decay_len"], d["reason"]


def autocast(device: str):
    if device == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


# ---------------------------------------------------------------- corpus + tokenizer
def optimizer_step(model, opt, loss, st: dict, t_last: float, bar) -> float:
    """Backward, clip the gradient norm to 1, step; count the step and its wall time in ``st``.
    Returns the new clock for the next step's timing."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    st["step"] += 1
    now = time.time()
    st["elapsed"] += now - t_last
    if bar:
        bar.update(1)
    return now


def resume(ckpt_path: str, model, opt, sched, fresh: dict, device: str, log, stage: str) -> dict:
    """Load model / optimiser / schedule from ``ckpt_path`` if it exists; returns the training state
    (``fresh`` when starting anew)."""
    if not os.path.exists(ckpt_path):
        return fresh
    ck = torch.load(ckpt_path, map_location=device)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])
    sched.load_state_dict(ck["sched"])
    log(stage=stage, resumed_at=ck["state"]["step"])
    return ck["state"]


def save_checkpoint(ckpt_path: str, model, opt, sched, st: dict) -> None:
    atomic_save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(), "state": st},
                ckpt_path)


def log_train_step(log, stage: str, st: dict, loss, sched, bar, every: int) -> None:
    """Every ``every`` steps: log loss / lr / elapsed (the only per-step host sync) and update the bar."""
    if st["step"] % every:
        return
    value, lr = loss.item(), sched(st["step"])
    log(stage=stage, step=st["step"], loss=value, lr=lr, elapsed=round(st["elapsed"], 1))
    if bar:
        bar.set_postfix(loss=f"{value:.3f}", lr=f"{lr:.2e}", refresh=False)


def decay_at_caps(sched, st: dict, max_steps: int, max_seconds: float, decay_frac: float, step_reason: str) -> None:
    """Start the LR decay early enough that training ends by ``max_steps`` steps or ``max_seconds``."""
    step = st["step"]
    if sched.decay_start is not None:
        return
    if step >= int(max_steps * (1 - decay_frac)):
        sched.start_decay(step, max_steps - step, step_reason)
    elif st["elapsed"] >= max_seconds * (1 - decay_frac):
        left = max_seconds - st["elapsed"]
        sched.start_decay(step, int(max(left, 0) / (st["elapsed"] / step)), "time cap")


def stdlib_files(max_bytes: int):
    """(relative path, text) of the standard library's .py files in sorted order, at most max_bytes."""
    root = sysconfig.get_paths()["stdlib"]
    out, total = [], 0
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in ("site-packages", "dist-packages", "__pycache__"))
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(d, name)
            try:
                if os.path.getsize(path) > 1_000_000:
                    continue
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError):
                continue
            if not text.strip():
                continue
            out.append((os.path.relpath(path, root), text))
            total += len(text.encode())
            if total >= max_bytes:
                return root, out
    return root, out


def is_heldout(rel_path: str, val_permille: int) -> bool:
    """The validation split: a stable hash of the file's path inside the standard library."""
    return int(hashlib.sha1(rel_path.encode()).hexdigest(), 16) % 1000 < val_permille


def heldout_tokens(tokenizer_json: str, val_permille: int = 25, max_bytes: int = 64_000_000) -> torch.Tensor:
    """Token ids [n] int64 of the running interpreter's held-out stdlib files, <|endoftext|>-separated
    (the prompts of the accept-length measurement; tests rebuild them from the packaged tokenizer)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_json)
    eos = tok.token_to_id(EOS)
    ids = []
    for enc in tok.encode_batch([t for rel, t in stdlib_files(max_bytes)[1] if is_heldout(rel, val_permille)],
                                add_special_tokens=False):
        ids += enc.ids + [eos]
    return torch.tensor(ids, dtype=torch.long)


def build_corpus(args, work: str, log: Log) -> dict:
    meta_path = os.path.join(work, "corpus.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            return json.load(f)
    root, files = stdlib_files(args.corpus_max_bytes)
    if sum(len(t) for _, t in files) < args.corpus_min_bytes:
        raise RuntimeError(f"the standard library at {root} has too little .py source "
                           f"({sum(len(t) for _, t in files)} chars < --corpus-min-bytes {args.corpus_min_bytes})")
    split = {"train": [], "val": []}
    for rel, text in files:
        split["val" if is_heldout(rel, args.val_permille) else "train"].append(text)
    for name, texts in split.items():
        with open(os.path.join(work, f"corpus_{name}.txt"), "w", encoding="utf-8") as f:
            f.write(EOS.join(texts))
    sha = hashlib.sha256()
    for rel, text in files:
        sha.update(rel.encode() + b"\0" + text.encode())
    meta = {"source": f"Python {sys.version.split()[0]} standard library (.py files)", "root": root,
            "files": len(files), "train_files": len(split["train"]), "val_files": len(split["val"]),
            "bytes": sum(len(t.encode()) for _, t in files), "sha256": sha.hexdigest()}
    write_json(meta, meta_path)
    log(stage="corpus", **{k: v for k, v in meta.items() if k != "root"})
    return meta


def build_tokenizer(args, work: str, log: Log):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tdir = os.path.join(work, "tokenizer")
    if not os.path.exists(os.path.join(tdir, "tokenizer.json")):
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=args.vocab, special_tokens=[EOS, MASK], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        with open(os.path.join(work, "corpus_train.txt"), encoding="utf-8") as f:
            docs = f.read().split(EOS)
        tok.train_from_iterator(docs, trainer=trainer)
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS, mask_token=MASK,
                                       clean_up_tokenization_spaces=False)
        fast.save_pretrained(tdir + ".tmp")
        shutil.rmtree(tdir, ignore_errors=True)
        os.replace(tdir + ".tmp", tdir)
        log(stage="tokenizer", vocab=len(fast))
    return PreTrainedTokenizerFast.from_pretrained(tdir)


def tokenize_corpus(work: str, tok, log: Log) -> dict:
    path = os.path.join(work, "tokens.pt")
    if os.path.exists(path):
        return torch.load(path)
    eos = tok.convert_tokens_to_ids(EOS)
    data = {}
    for name in ("train", "val"):
        with open(os.path.join(work, f"corpus_{name}.txt"), encoding="utf-8") as f:
            docs = f.read().split(EOS)
        ids = []
        for enc in tok._tokenizer.encode_batch(docs, add_special_tokens=False):
            ids.extend(enc.ids)
            ids.append(eos)
        data[name] = torch.tensor(ids, dtype=torch.int16 if len(tok) < 32768 else torch.int32)
    atomic_save(data, path)
    log(stage="tokens", train_tokens=len(data["train"]), val_tokens=len(data["val"]))
    return data


# ---------------------------------------------------------------- target
def make_target(args, tok):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    eos = tok.convert_tokens_to_ids(EOS)
    cfg = Qwen3Config(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        head_dim=args.head_dim, max_position_embeddings=args.max_positions, rope_theta=args.rope_theta,
        rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)
    cfg.architectures = ["Qwen3ForCausalLM"]
    torch.manual_seed(args.seed)
    return Qwen3ForCausalLM(cfg)


def windows(tokens: torch.Tensor, starts: torch.Tensor, length: int) -> torch.Tensor:
    """[len(starts), length] int64 slices of a 1-D token tensor."""
    idx = starts[:, None] + torch.arange(length)[None]
    return tokens[idx].long()


def target_val_loss(model, val: torch.Tensor, args) -> float:
    n = min(args.val_windows, (len(val) - 1) // args.seq_len)
    starts = torch.arange(n) * args.seq_len
    model.eval()
    tot = cnt = 0.0
    with torch.no_grad(), autocast(args.device):
        for i in range(0, n, args.batch):
            x = windows(val, starts[i:i + args.batch], args.seq_len + 1).to(args.device)
            logits = model(input_ids=x[:, :-1]).logits
            tot += F.cross_entropy(logits.float().flatten(0, 1), x[:, 1:].flatten(), reduction="sum").item()
            cnt += x[:, 1:].numel()
    model.train()
    return tot / cnt


def train_target(args, work: str, tok, data: dict, log: Log) -> dict:
    """Train until the validation loss plateaus; export bf16 to <work>/target. Returns stats."""
    out_dir, ckpt_path = os.path.join(work, "target"), os.path.join(work, "target_train.pt")
    stats_path = os.path.join(work, "target_stats.json")
    if os.path.exists(stats_path):
        with open(stats_path) as f:
            return json.load(f)
    model = make_target(args, tok).to(args.device)
    decay, no_decay = [], []
    for n_, p in model.named_parameters():
        (decay if p.ndim == 2 else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.target_lr, betas=(0.9, 0.95), fused=args.device == "cuda")
    sched = WSD(args.target_lr, args.warmup, min_ratio=0.02)
    st = resume(ckpt_path, model, opt, sched, {"step": 0, "elapsed": 0.0, "best": float("inf"), "bad": 0, "evals": []},
                args.device, log, "target")

    def save():
        save_checkpoint(ckpt_path, model, opt, sched, st)

    train = data["train"]
    n_params = sum(p.numel() for p in model.parameters())
    bar = progress(args.target_max_steps, st["step"], "target")
    model.train()
    t_last = time.time()
    while not sched.done(st["step"]):
        step = st["step"]
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        starts = torch.randint(0, len(train) - args.seq_len - 1, (args.batch,), generator=g)
        x = windows(train, starts, args.seq_len + 1).to(args.device)
        for group in opt.param_groups:
            group["lr"] = sched(step)
        with autocast(args.device):
            logits = model(input_ids=x[:, :-1]).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), x[:, 1:].flatten())
        t_last = optimizer_step(model, opt, loss, st, t_last, bar)
        step = st["step"]
        log_train_step(log, "target", st, loss, sched, bar, args.log_every)
        decay_at_caps(sched, st, args.target_max_steps, args.target_max_seconds, args.decay_frac, "step cap")
        if step % args.eval_every == 0 or sched.done(step):
            val = target_val_loss(model, data["val"], args)
            st["evals"].append([step, val])
            if val < st["best"] * (1 - args.plateau_tol):
                st["best"], st["bad"] = val, 0
            else:
                st["best"], st["bad"] = min(st["best"], val), st["bad"] + 1
            log(stage="target", step=step, val_loss=val, best=st["best"], bad_evals=st["bad"])
            if sched.decay_start is None and st["bad"] >= args.patience:
                sched.start_decay(step, min(int(args.decay_frac * step), args.target_max_steps - step),
                                  "val loss plateau")
            save()
        if sched.decay_start == step:
            log(stage="target", step=step, decay_steps=sched.decay_len, reason=sched.reason)
            if bar:
                bar.total = step + sched.decay_len
        if step % args.ckpt_every == 0:
            save()
    if bar:
        bar.close()
    save()
    tmp = out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.cpu().to(torch.bfloat16).save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp, out_dir)
    stats = {"params": n_params, "steps": st["step"], "train_seconds": round(st["elapsed"], 1),
             "tokens_seen": st["step"] * args.batch * args.seq_len, "val_losses": st["evals"],
             "final_val_loss": st["evals"][-1][1], "stop_reason": sched.reason, "decay_from": sched.decay_start}
    write_json(stats, stats_path)
    return stats


# ---------------------------------------------------------------- distillation text
@torch.no_grad()
def greedy_generate(target: RefQwen3, prompts: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy continuation with a KV cache. Shape: prompts [B, P] int64 -> [B, P + new_tokens]."""
    B, P = prompts.shape
    dev = prompts.device
    cache = KVCache(target.config.num_hidden_layers)
    out = target(prompts, torch.arange(P, device=dev).expand(B, -1))
    cache.append(out.kv)
    seq = [prompts, out.logits[:, -1:].argmax(-1)]
    for t in range(P, P + new_tokens - 1):
        out = target(seq[-1], torch.full((B, 1), t, device=dev), cache)
        cache.append(out.kv)
        seq.append(out.logits[:, -1:].argmax(-1))
    return torch.cat(seq, 1)


def sample_prompts(tokens: torch.Tensor, n: int, length: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return windows(tokens, torch.randint(0, len(tokens) - length, (n,), generator=g), length)


def load_target_ref(work: str, device: str) -> RefQwen3:
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = RefQwen3.from_pretrained(os.path.join(work, "target"), dtype=dtype).to(device)
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def build_distill(args, work: str, data: dict, target: RefQwen3, log: Log) -> dict:
    path = os.path.join(work, "distill.pt")
    if os.path.exists(path):
        return torch.load(path)
    t0 = time.time()
    out = {}
    for name, n, seed in (("train", args.distill_seqs, args.seed + 1), ("val", args.distill_val_seqs, args.seed + 2)):
        prompts = sample_prompts(data[name], n, args.distill_prompt_len, seed)
        seqs = []
        for i in range(0, n, args.distill_batch):
            seqs.append(greedy_generate(target, prompts[i:i + args.distill_batch].to(args.device),
                                        args.distill_gen_len).cpu())
        out[name] = torch.cat(seqs).to(torch.int16 if args.vocab < 32768 else torch.int32)
    out["prompt_len"] = args.distill_prompt_len
    out["seconds"] = round(time.time() - t0, 1)
    atomic_save(out, path)
    log(stage="distill", train_seqs=len(out["train"]), val_seqs=len(out["val"]), seq_len=out["train"].shape[1],
        seconds=out["seconds"])
    return out


# ---------------------------------------------------------------- drafter
def position_weights(L: int, gamma: float, device) -> torch.Tensor:
    """DFlash's loss weight per block position k: exp(-(k-1)/gamma) for k >= 1, 0 for the anchor."""
    k = torch.arange(L, device=device, dtype=torch.float32)
    w = torch.exp(-(k - 1) / gamma) if gamma > 0 else torch.ones(L, device=device)
    w[0] = 0.0
    return w


def sample_anchors(B: int, n: int, lo: int, hi: int, g: torch.Generator) -> torch.Tensor:
    """[B, n] int64 distinct anchors per row, uniform in [lo, hi] (inclusive)."""
    n = min(n, hi - lo + 1)
    return torch.rand(B, hi - lo + 1, generator=g).argsort(1)[:, :n].sort(1).values + lo


@torch.no_grad()
def draft_val_metrics(target, drafter, seqs: torch.Tensor, prompt_len: int, args) -> dict:
    """Drafter metrics on held-out distillation text, from its predictions at EVERY anchor.
    In target-greedy text a DFLASH round anchored at a accepts exactly the run r(a) of correct leading
    predictions, and the next round is anchored at a + r(a) + 1; walking that chain from the first
    generated token reproduces greedy DFLASH decoding, so ``accept_len`` is DFLASH's tokens per round
    (bonus included) on these sequences. Also: the weighted val loss, and accuracy by depth."""
    L, T = drafter.config.block_size, seqs.shape[1]
    first = prompt_len - 1
    w = position_weights(L, args.loss_gamma, args.device)
    loss = wsum = 0.0
    correct, count, tokens, rounds, pos_runs = torch.zeros(L - 1), 0, 0, 0, []
    drafter.eval()
    for i in range(0, len(seqs), args.val_seq_batch):
        x = seqs[i:i + args.val_seq_batch].long().to(args.device)
        anchors = torch.arange(first, T - L + 1, device=args.device).expand(x.shape[0], -1)
        with autocast(args.device):
            block_ids, positions, labels, mask = training_blocks(x, anchors, L, drafter.config.mask_token_id)
            logits = draft_logits(target, drafter, x, block_ids, positions, mask)
        ce = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100, reduction="none")
        wl = w.repeat(anchors.shape[1]).expand(x.shape[0], -1).flatten()
        loss += (ce * wl).sum().item()
        wsum += wl.sum().item()
        hit = (logits.argmax(-1) == labels).view(x.shape[0], -1, L)[:, :, 1:].cpu()  # [B, anchors, L-1]
        correct += hit.flatten(0, 1).float().sum(0)
        count += hit.shape[0] * hit.shape[1]
        runs = hit.int().cumprod(-1).sum(-1)  # [B, anchors]: accepted draft tokens per anchor
        pos_runs.append(runs.flatten().float())
        for row in runs.tolist():
            a = 1  # the first generated token is the first bonus token
            while a < len(row):
                tokens, rounds, a = tokens + row[a] + 1, rounds + 1, a + row[a] + 1
    drafter.train()
    acc = (correct / count).tolist()
    return {"val_loss": loss / wsum, "accept_len": tokens / max(rounds, 1),
            "accept_len_per_position": 1.0 + torch.cat(pos_runs).mean().item(),
            "acc_depth1": acc[0], "acc_by_depth": [round(a, 4) for a in acc]}


def draft_logits(target, drafter, x, block_ids, positions, mask):
    """Logits [B, n*L, V] of the training blocks (the same forward as ``dflash_loss``)."""
    B, T = x.shape
    seq_pos = torch.arange(T, device=x.device).expand(B, -1)
    feats = target(x, seq_pos, capture_layer_ids=drafter.config.target_layer_ids).features
    ctx = KVCache(drafter.config.num_hidden_layers)
    ctx.append(drafter.context_kv(feats, seq_pos))
    return target.lm_head(drafter(target.embed(block_ids), positions, ctx, mask))


def make_drafter(args, target: RefQwen3, tok) -> DFlashDraftModel:
    cfg = DFlashConfig.for_target(
        target.config, num_hidden_layers=args.draft_layers, block_size=args.block_size,
        target_layer_ids=args.target_layer_ids, mask_token_id=tok.convert_tokens_to_ids(MASK),
        intermediate_size=args.draft_intermediate)
    torch.manual_seed(args.seed + 7)
    drafter = DFlashDraftModel(cfg)
    with torch.no_grad():  # GPT-style init: N(0, 0.02), residual projections scaled by depth
        for name, p in drafter.named_parameters():
            if p.ndim == 2:
                std = 0.02 / math.sqrt(2 * cfg.num_hidden_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
                p.normal_(0.0, std)
    if args.draft_init == "target":
        init_drafter_from_target(drafter, target)
    return drafter


@torch.no_grad()
def init_drafter_from_target(drafter: DFlashDraftModel, target: RefQwen3) -> None:
    """Warm start: the drafter's layers copy the target's LAST ``num_hidden_layers`` layers, its final
    norm the target's, and ``fc`` starts as a pick of the deepest captured feature (so a block's context
    begins as the residual stream the copied layers were trained to read). Shapes must match."""
    cfg, tcfg = drafter.config, target.config
    first = tcfg.num_hidden_layers - cfg.num_hidden_layers
    tparams = dict(target.named_parameters())
    for name, p in drafter.named_parameters():
        if name.startswith("layers."):
            i, rest = name.split(".", 2)[1:]
            src = tparams[f"model.layers.{first + int(i)}.{rest}"]
        elif name == "norm.weight":
            src = tparams["model.norm.weight"]
        else:
            continue
        if src.shape != p.shape:
            raise ValueError(f"--draft-init target: {name} is {tuple(p.shape)}, the target's is {tuple(src.shape)}")
        p.copy_(src.to(p.dtype))
    H = cfg.hidden_size
    drafter.fc.weight.zero_()
    drafter.fc.weight[:, -H:] = torch.eye(H, dtype=drafter.fc.weight.dtype)


def train_draft(args, work: str, tok, target: RefQwen3, distill: dict, log: Log) -> dict:
    stats_path, ckpt_path = os.path.join(work, "draft_stats.json"), os.path.join(work, "draft_train.pt")
    if os.path.exists(stats_path):
        with open(stats_path) as f:
            return json.load(f)
    drafter = make_drafter(args, target, tok).to(args.device).train()
    opt = torch.optim.AdamW(drafter.parameters(), lr=args.draft_lr, betas=(0.9, 0.95), weight_decay=0.01,
                            fused=args.device == "cuda")
    sched = WSD(args.draft_lr, args.warmup, min_ratio=0.02)
    st = resume(ckpt_path, drafter, opt, sched, {"step": 0, "elapsed": 0.0, "evals": []}, args.device, log, "draft")

    def save():
        save_checkpoint(ckpt_path, drafter, opt, sched, st)

    seqs, P, L = distill["train"], distill["prompt_len"], args.block_size
    T = seqs.shape[1]
    w = position_weights(L, args.loss_gamma, args.device)
    bar = progress(args.draft_steps, st["step"], "draft")
    t_last = time.time()
    while not sched.done(st["step"]):
        step = st["step"]
        g = torch.Generator().manual_seed(args.seed * 7_000_003 + step)
        rows = torch.randint(0, len(seqs), (args.draft_batch,), generator=g)
        x = seqs[rows].long().to(args.device)
        anchors = sample_anchors(len(rows), args.anchors_per_seq, P - 1, T - L, g).to(args.device)
        for group in opt.param_groups:
            group["lr"] = sched(step)
        with autocast(args.device):
            loss = dflash_loss(target, drafter, x, anchors, w)
        t_last = optimizer_step(drafter, opt, loss, st, t_last, bar)
        step = st["step"]
        log_train_step(log, "draft", st, loss, sched, bar, args.log_every)
        decay_at_caps(sched, st, args.draft_steps, args.draft_max_seconds, args.decay_frac, "step schedule")
        if bar and sched.decay_start == step:
            bar.total = step + sched.decay_len
        if step % args.eval_every == 0 or sched.done(step):
            m = draft_val_metrics(target, drafter, distill["val"], P, args)
            st["evals"].append([step, m["val_loss"], m["accept_len"]])
            log(stage="draft", step=step, **{k: v for k, v in m.items() if k != "acc_by_depth"})
            save()
        elif step % args.ckpt_every == 0:
            save()
    if bar:
        bar.close()
    save()
    final = draft_val_metrics(target, drafter, distill["val"], P, args)
    out_dir = os.path.join(work, "draft")
    shutil.rmtree(out_dir, ignore_errors=True)
    drafter.cpu().save_pretrained(out_dir, dtype=torch.bfloat16)
    tok.save_pretrained(out_dir)
    stats = {"params": sum(p.numel() for p in drafter.parameters()), "steps": st["step"],
             "train_seconds": round(st["elapsed"], 1), "blocks_seen": st["step"] * args.draft_batch * args.anchors_per_seq,
             "val_evals": st["evals"], "final": final, "stop_reason": sched.reason,
             "max_seconds": round(args.draft_max_seconds, 1)}
    write_json(stats, stats_path)
    return stats


# ---------------------------------------------------------------- evaluation
_EVAL = {}


def _eval_init(work: str, threads: int) -> None:
    torch.set_num_threads(threads)
    _EVAL["target"] = RefQwen3.from_pretrained(os.path.join(work, "target"), dtype=torch.float32)
    _EVAL["draft"] = DFlashDraftModel.from_pretrained(os.path.join(work, "draft"), dtype=torch.float32)


def _eval_prompt(job):
    """All modes on one prompt: {mode: (new tokens, accept length of every round)}."""
    from sglang_ddtree.reference import loop

    prompt, new_tokens, budgets, topk = job
    target, drafter = _EVAL["target"], _EVAL["draft"]
    out = {"greedy": (loop.greedy_generate(target, prompt, new_tokens), [])}
    g = loop.dflash_generate(target, drafter, prompt, new_tokens)
    out["dflash"] = (g.tokens, [r.num_accepted for r in g.rounds])
    for b in budgets:
        g = loop.ddtree_generate(target, drafter, prompt, new_tokens, budget=b, topk=topk)
        out[f"ddtree_b{b}"] = (g.tokens, [r.num_accepted for r in g.rounds])
    return out


def eval_accept(args, work: str, data: dict, log: Log) -> dict:
    """Mean accept length (tokens per round, bonus included) of DFLASH and DDTree, greedy, with the
    reference loop on held-out prompts; float32 on the CPU (the loop is a host-side reference), one
    prompt per worker process. Also checks that every speculative output equals greedy decoding."""
    path = os.path.join(work, "eval.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    t0 = time.time()
    prompts = sample_prompts(data["val"], args.eval_prompts, args.eval_prompt_len, args.seed + 3).tolist()
    jobs = [(p, args.eval_new_tokens, args.budgets, args.eval_topk) for p in prompts]
    workers = args.eval_workers or max(1, min(len(jobs), os.cpu_count() or 1, 16))
    if workers == 1:  # one thread: these tiny forwards are slower with more
        threads = torch.get_num_threads()
        _eval_init(work, 1)
        results = [_eval_prompt(j) for j in jobs]
        torch.set_num_threads(threads)
    else:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(workers, initializer=_eval_init, initargs=(work, 1)) as pool:
            results = pool.map(_eval_prompt, jobs)
    res = {"prompts": len(prompts), "prompt_len": args.eval_prompt_len, "new_tokens": args.eval_new_tokens,
           "topk": args.eval_topk, "block_size": args.block_size, "dtype": "float32", "greedy": True,
           "prompt_source": "held-out stdlib files (validation split)", "workers": workers}
    for name in ["dflash"] + [f"ddtree_b{b}" for b in args.budgets]:
        accepts = [a for r in results for a in r[name][1]]
        tau = sum(a + 1 for a in accepts) / len(accepts)
        same = sum(r[name][0] == r["greedy"][0] for r in results)
        res[name] = {"accept_len": round(tau, 4), "rounds": len(accepts),
                     "budget": None if name == "dflash" else int(name.split("_b")[1]),
                     "outputs_equal_greedy": f"{same}/{len(prompts)}"}
        log(stage="eval", mode=name, num_accepted=tau, rounds=len(accepts), equal_greedy=f"{same}/{len(prompts)}")
    res["seconds"] = round(time.time() - t0, 1)
    write_json(res, path)
    return res


# ---------------------------------------------------------------- main
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/tiny_pair_work", help="checkpoints + intermediate files (resumable)")
    ap.add_argument("--out", default=None, help="export dir for target/, draft/, summary.json (default <work>/pair)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="tiny corpus and step counts: a CPU smoke test")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    ap.add_argument("--reuse-target", default=None, metavar="PAIR_DIR",
                    help="skip the tokenizer and target stages: take PAIR_DIR/target (tokenizer included) and the "
                         "target record of PAIR_DIR/summary.json, e.g. the packaged pair, and train a new drafter for it")
    a = ap.add_argument_group("corpus + tokenizer")
    a.add_argument("--corpus-max-bytes", type=int, default=64_000_000)
    a.add_argument("--corpus-min-bytes", type=int, default=2_000_000)
    a.add_argument("--val-permille", type=int, default=25, help="held-out share of files, per mille")
    a.add_argument("--vocab", type=int, default=2048)
    a = ap.add_argument_group("target")
    a.add_argument("--hidden", type=int, default=256)
    a.add_argument("--intermediate", type=int, default=512)
    a.add_argument("--layers", type=int, default=4)
    a.add_argument("--heads", type=int, default=2)
    a.add_argument("--kv-heads", type=int, default=2)
    a.add_argument("--head-dim", type=int, default=128)
    a.add_argument("--rope-theta", type=float, default=1_000_000.0)
    a.add_argument("--max-positions", type=int, default=4096)
    a.add_argument("--seq-len", type=int, default=1024)
    a.add_argument("--batch", type=int, default=32)
    a.add_argument("--target-lr", type=float, default=2e-3)
    a.add_argument("--target-max-steps", type=int, default=6000)
    a.add_argument("--target-max-seconds", type=float, default=120.0)
    a.add_argument("--val-windows", type=int, default=128, help="validation windows of --seq-len tokens")
    a.add_argument("--plateau-tol", type=float, default=0.005, help="relative val-loss gain that counts as progress")
    a.add_argument("--patience", type=int, default=3, help="evals without progress that end the stable phase")
    a = ap.add_argument_group("schedule (both models)")
    a.add_argument("--warmup", type=int, default=100)
    a.add_argument("--decay-frac", type=float, default=0.2, help="decay phase length as a fraction of the steps")
    a.add_argument("--eval-every", type=int, default=250)
    a.add_argument("--log-every", type=int, default=50)
    a.add_argument("--ckpt-every", type=int, default=500)
    a = ap.add_argument_group("distillation text")
    a.add_argument("--distill-seqs", type=int, default=16384)
    a.add_argument("--distill-val-seqs", type=int, default=128)
    a.add_argument("--distill-prompt-len", type=int, default=64)
    a.add_argument("--distill-gen-len", type=int, default=256)
    a.add_argument("--distill-batch", type=int, default=1024)
    a = ap.add_argument_group("drafter")
    a.add_argument("--draft-layers", type=int, default=2)
    a.add_argument("--draft-intermediate", type=int, default=512)
    a.add_argument("--block-size", type=int, default=16)
    a.add_argument("--target-layer-ids", default="0,1,2")
    a.add_argument("--draft-init", choices=["random", "target"], default="random",
                   help="drafter init: random (GPT-style) or a copy of the target's last layers + final norm")
    a.add_argument("--draft-lr", type=float, default=2e-3)
    a.add_argument("--draft-steps", type=int, default=20000)
    a.add_argument("--draft-max-seconds", type=float, default=100.0)
    a.add_argument("--time-budget", type=float, default=0.0,
                   help="seconds for the whole run (0 = none): the drafter then trains until --eval-reserve "
                        "seconds before it (but at least 60 s), instead of --draft-max-seconds")
    a.add_argument("--eval-reserve", type=float, default=50.0)
    a.add_argument("--draft-batch", type=int, default=64)
    a.add_argument("--anchors-per-seq", type=int, default=32)
    a.add_argument("--loss-gamma", type=float, default=7.0, help="DFlash position decay (7 for block 16)")
    a.add_argument("--val-seq-batch", type=int, default=8, help="held-out sequences per drafter validation forward")
    a = ap.add_argument_group("evaluation")
    a.add_argument("--eval-prompts", type=int, default=24)
    a.add_argument("--eval-prompt-len", type=int, default=64)
    a.add_argument("--eval-new-tokens", type=int, default=128)
    a.add_argument("--eval-topk", type=int, default=8)
    a.add_argument("--budgets", default="16,64,256")
    a.add_argument("--eval-workers", type=int, default=0, help="processes for the evaluation (0 = one per core, <= 16)")
    if ap.parse_known_args(argv)[0].quick:  # smaller defaults; explicit flags still win
        ap.set_defaults(
            corpus_max_bytes=600_000, corpus_min_bytes=100_000, val_permille=100, vocab=512, seq_len=64,
            batch=8, target_max_steps=20, target_max_seconds=30.0, val_windows=8, warmup=5, eval_every=10,
            log_every=10, ckpt_every=10, distill_seqs=16, distill_val_seqs=4, distill_prompt_len=16,
            distill_gen_len=40, distill_batch=16, draft_steps=20, draft_max_seconds=20.0, draft_batch=4,
            anchors_per_seq=4, val_seq_batch=2, eval_prompts=2, eval_prompt_len=16, eval_new_tokens=24, eval_workers=1)
    args = ap.parse_args(argv)
    args.target_layer_ids = [int(i) for i in args.target_layer_ids.split(",")]
    args.budgets = [int(b) for b in args.budgets.split(",")]
    args.out = args.out or os.path.join(args.work, "pair")
    return args


def export(args, work: str, summary: dict) -> None:
    """<out>/{target,draft}/ and <out>/summary.json: exactly what the package ships."""
    out = args.out
    os.makedirs(out, exist_ok=True)
    for name in ("target", "draft"):
        shutil.rmtree(os.path.join(out, name), ignore_errors=True)
        shutil.copytree(os.path.join(work, name), os.path.join(out, name))
    gen_cfg = os.path.join(out, "target", "generation_config.json")
    if os.path.exists(gen_cfg):
        os.remove(gen_cfg)
    for d, _, files in os.walk(out):
        for f in files:
            os.chmod(os.path.join(d, f), 0o644)
    summary["pair_bytes"] = dir_bytes(os.path.join(out, "target")) + dir_bytes(os.path.join(out, "draft"))
    write_json(summary, os.path.join(out, "summary.json"))
    if summary["pair_bytes"] > MAX_PAIR_BYTES and not args.quick:
        raise RuntimeError(f"the pair is {summary['pair_bytes']} bytes > {MAX_PAIR_BYTES}")


def seed_reused_target(pair_dir: str, work: str, log: Log) -> None:
    """Put PAIR_DIR's target where the target stage leaves its output, so that the tokenizer, tokens and
    target stages are skipped (resumable-stage files: tokenizer/, target/, target_stats.json)."""
    src = os.path.join(pair_dir, "target")
    if not os.path.exists(os.path.join(src, "tokenizer.json")):
        raise SystemExit(f"--reuse-target {pair_dir}: no target/tokenizer.json there")
    if os.path.exists(os.path.join(work, "target_stats.json")):
        return
    shutil.rmtree(os.path.join(work, "target"), ignore_errors=True)
    shutil.copytree(src, os.path.join(work, "target"))
    tdir = os.path.join(work, "tokenizer")
    shutil.rmtree(tdir, ignore_errors=True)
    os.makedirs(tdir)
    for name in os.listdir(src):
        if name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(os.path.join(src, name), tdir)
    stats = {}
    summary = os.path.join(pair_dir, "summary.json")
    if os.path.exists(summary):
        with open(summary) as f:
            stats = dict(json.load(f).get("target", {}))
    stats["reused_from"] = os.path.abspath(pair_dir)
    write_json(stats, os.path.join(work, "target_stats.json"))
    log(stage="target", reused_from=stats["reused_from"])


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    work = args.work
    os.makedirs(work, exist_ok=True)
    log = Log(os.path.join(work, "train_log.jsonl"))
    cfg_path = os.path.join(work, "args.json")
    cfg = {k: v for k, v in vars(args).items() if k not in ("work", "out", "threads")}
    if os.path.exists(cfg_path):
        with open(cfg_path) as f:
            old = json.load(f)
        if old != cfg:
            raise SystemExit(f"{work} holds a run with other settings: {sorted(k for k in cfg if old.get(k) != cfg[k])}; "
                             "use another --work")
    write_json(cfg, cfg_path)
    torch.manual_seed(args.seed)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    times = {}
    t_start = time.time()

    def timed(name, fn, *a):
        t0 = time.time()
        r = fn(*a)
        times[name] = round(time.time() - t0, 1)
        return r

    corpus = timed("corpus", build_corpus, args, work, log)
    if args.reuse_target:
        seed_reused_target(args.reuse_target, work, log)
    tok = timed("tokenizer", build_tokenizer, args, work, log)
    data = timed("tokens", tokenize_corpus, work, tok, log)
    target_stats = timed("target", train_target, args, work, tok, data, log)
    target = load_target_ref(work, args.device)
    distill = timed("distill", build_distill, args, work, data, target, log)
    if args.time_budget:
        left = args.time_budget - (time.time() - t_start) - args.eval_reserve
        args.draft_max_seconds = max(60.0, left)
    draft_stats = timed("draft", train_draft, args, work, tok, target, distill, log)
    del target
    accept = timed("eval", eval_accept, args, work, data, log)
    summary = {
        "args": cfg, "python": sys.version.split()[0], "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
        "corpus": {k: v for k, v in corpus.items() if k != "root"},
        "tokens": {"train": len(data["train"]), "val": len(data["val"]), "vocab": len(tok)},
        "target": target_stats, "distill": {"train_seqs": len(distill["train"]), "val_seqs": len(distill["val"]),
                                            "seq_len": distill["train"].shape[1], "prompt_len": distill["prompt_len"]},
        "draft": draft_stats, "accept": accept, "stage_seconds": times,
    }
    export(args, work, summary)
    log(stage="done", out=args.out, pair_bytes=summary["pair_bytes"], seconds=sum(times.values()))
    return summary


if __name__ == "__main__":
    main()
