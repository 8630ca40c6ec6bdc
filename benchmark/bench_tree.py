"""Per-round cost of the tree ops the worker runs, CUDA-graph replayed; the draft top-K head beside it.

The round is the tree work of one greedy DDTree round as ``worker.worker`` runs it: BUILD TREE
(``build_tree``, then the bonus tokens written into row 0) and VERIFY TOPOLOGY (``build_verify_topology``:
FULL_MASK for a ``--prefix-len`` prefix per request, positions, retrieve links) before the target's verify
forward, ACCEPT + COMMIT (``worker.kv_commit.greedy_accept_commit``, the fused greedy accept + commit
kernel) after it. ``triton_round_ms`` is the three in one CUDA graph; ``triton_build_ms``,
``triton_topology_ms`` and ``triton_accept_commit_ms`` are the parts alone (``round_parts`` in the JSON).
For bs x budget (L = 16, K = 8) it also times the same math as PyTorch ops (``backend="torch"``) and
per-request CPU heaps (the paper's Algorithm 1) fed by a device-to-host copy - what other ports do.
``triton_accept_greedy_ms`` is the tree package's stand-alone ``accept_greedy`` (not in the worker's round).

The draft top-K head (``worker.draft_head.DraftTopKHead``, tp 1: hidden [bs*(L-1), H] bf16 x LM-head
weight [V, H] bf16 -> top-K log-probs) runs before the round, inside the draft forward's graph; it is
timed separately (``head_results``) at the shapes of ``--head-shapes`` (default: Qwen3-8B and the tiny
pair). Writes a JSON (GPU, versions, command, timings) to ``--out``.

    python benchmark/bench_tree.py [--out benchmark/results/bench_tree.json] [--quick]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))

from sglang_ddtree.tree import Tree, accept_greedy, build_tree, build_verify_topology  # noqa: E402
from sglang_ddtree.tree.build import build_tree_triton  # noqa: E402
from sglang_ddtree.tree.reference import (  # noqa: E402
    build_tree_reference,
    build_tree_torch,
    build_verify_topology_torch,
)
from sglang_ddtree.worker.draft_head import DraftTopKHead  # noqa: E402
from sglang_ddtree.worker.kv_commit import greedy_accept_commit  # noqa: E402

GOALS_MS = {(1, 64): 0.06, (64, 512): 0.2}  # issue 3: build + topology + accept on an H200
ROUND_PARTS = ("triton_build_ms", "triton_topology_ms", "triton_accept_commit_ms")
HEAD_SHAPES = "qwen3_8b:4096:151936,tiny_pair:256:2048"  # name:H:V


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _head_shapes(text: str) -> list[tuple[str, int, int]]:
    """``name:H:V,...`` -> [(name, hidden size, vocab size)]."""
    out = []
    for item in text.split(","):
        if item:
            name, hidden, vocab = item.split(":")
            out.append((name, int(hidden), int(vocab)))
    return out


def make_inputs(bs, depth_limit, k, prefix_len, vocab, gen, dev):
    """Draft top-K [bs, L-1, K] (float32 log-probs, int64 ids), roots [bs] int64, prefix lengths [bs] int64."""
    logits = torch.randn(bs, depth_limit, vocab, generator=gen) * 3.0
    top = torch.log_softmax(logits, -1).topk(k, dim=-1)
    roots = torch.randint(0, vocab, (bs,), generator=gen)
    seq = torch.full((bs,), prefix_len, dtype=torch.int64)
    return top.values.to(dev), top.indices.to(dev), roots.to(dev), seq.to(dev)


def planted_target(tree: Tree, gen) -> torch.Tensor:
    """[bs, N] int64: target tokens along the root path of each request's last row (a deep accept),
    noise elsewhere."""
    bs, n = tree.parents.shape
    parents, tokens, num = tree.parents.cpu(), tree.token_ids.cpu(), tree.num_nodes.cpu()
    target = torch.randint(0, 1000, (bs, n), generator=gen)
    for b in range(bs):
        row = int(num[b]) - 1
        while row > 0:
            target[b, int(parents[b, row])] = tokens[b, row]
            row = int(parents[b, row])
    return target.to(tree.parents.device)


def verify_slots(bs: int, n: int, dev) -> torch.Tensor:
    """[bs, N] int64: the verify forward's out_cache_loc, distinct slots from 1 (slot 0 is SGLang's dummy)."""
    return torch.arange(1, bs * n + 1, dtype=torch.int64, device=dev).view(bs, n)


def time_graph(fn, iters: int, warmup: int = 3) -> float:
    """Capture fn() in a CUDA graph; mean ms per replay over `iters` back-to-back replays."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(warmup):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def time_heap(lp, ids, roots, budget, rounds: int) -> float:
    """Per-request CPU heaps: D2H copy, heap per request, tree back to the GPU. Mean ms per round."""
    dev = lp.device
    times = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        lp_c, ids_c, roots_c = lp.cpu(), ids.cpu(), roots.cpu()
        trees = [build_tree_reference(lp_c[b], ids_c[b], budget, int(roots_c[b])) for b in range(lp_c.shape[0])]
        for f in ("token_ids", "parents", "depths", "scores", "valid"):
            torch.cat([getattr(t, f) for t in trees]).to(dev, non_blocking=True)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return sum(times) / len(times)


def _same(a, b, fields) -> bool:
    return all(torch.equal(getattr(a, f), getattr(b, f)) for f in fields)


def bench_config(bs, budget, args, gen, dev) -> dict:
    """One (bs, budget) record: exactness of every timed path vs the PyTorch path, then the timings."""
    lp, ids, roots, seq = make_inputs(bs, args.L - 1, args.K, args.prefix_len, args.vocab, gen, dev)
    seq_sum = args.prefix_len * bs
    tree = build_tree(lp, ids, budget)
    tree.token_ids[:, 0].copy_(roots)  # the root tokens, as worker.tree_api.fill_root
    width = tree.max_depth + 1  # the accept width: root + one node per depth
    target = planted_target(tree, gen)
    loc = verify_slots(bs, tree.num_rows, dev)
    rec = {"bs": bs, "budget": budget}
    tree_fields = ("token_ids", "parents", "depths", "scores", "valid", "num_nodes")
    rec["exact_vs_torch_path"] = _same(tree, build_tree_torch(lp, ids, budget, roots), tree_fields)
    want_topo = build_verify_topology_torch(tree, seq, seq_sum, with_tree_mask=False)
    got_topo = build_verify_topology(tree, seq, seq_sum, with_tree_mask=False)
    rec["exact_topology"] = _same(
        got_topo, want_topo, ("custom_mask", "positions", "retrieve_next_token", "retrieve_next_sibling")
    )
    del want_topo, got_topo
    commit = greedy_accept_commit(tree, tree.token_ids, target, loc, seq, width)
    rec["exact_accept_commit"] = all(
        torch.equal(x, y)
        for x, y in zip(commit, greedy_accept_commit(tree, tree.token_ids, target, loc, seq, width, backend="torch"))
    )
    rec["accept_len_mean"] = float(commit.accept_lens.float().mean())  # accepted drafts + 1 (the bonus)

    def round_fn(backend):
        def fn():
            t = build_tree(lp, ids, budget, backend=backend)
            t.token_ids[:, 0].copy_(roots)
            build_verify_topology(t, seq, seq_sum, with_tree_mask=False, backend=backend)
            greedy_accept_commit(t, t.token_ids, target, loc, seq, width, backend=backend)

        return fn

    rec["triton_round_ms"] = time_graph(round_fn("auto"), args.iters)
    rec["triton_build_ms"] = time_graph(lambda: build_tree(lp, ids, budget).token_ids[:, 0].copy_(roots), args.iters)
    for strategy in ("bitonic", "merge"):  # phase 1 of the fused builder, pinned ("auto" picks one)
        t = build_tree_triton(lp, ids, budget, roots, strategy=strategy)
        rec[f"exact_{strategy}"] = _same(t, tree, ("parents", "scores"))
        rec[f"triton_build_{strategy}_ms"] = time_graph(
            lambda s=strategy: build_tree_triton(lp, ids, budget, roots, strategy=s), args.iters
        )
    rec["triton_topology_ms"] = time_graph(
        lambda: build_verify_topology(tree, seq, seq_sum, with_tree_mask=False), args.iters
    )
    rec["triton_topology_no_full_mask_ms"] = time_graph(  # positions + retrieve links only, no mask
        lambda: build_verify_topology(tree, seq, with_tree_mask=False), args.iters
    )
    rec["triton_accept_commit_ms"] = time_graph(
        lambda: greedy_accept_commit(tree, tree.token_ids, target, loc, seq, width), args.iters
    )
    rec["triton_parts_sum_ms"] = sum(rec[k] for k in ROUND_PARTS)
    rec["triton_accept_greedy_ms"] = time_graph(lambda: accept_greedy(tree, target), args.iters)  # not in the round
    if not args.skip_torch_path:
        rec["torch_round_ms"] = time_graph(round_fn("torch"), max(10, args.iters // 10))
    est = bs * (0.2 + budget * 0.012)  # ms per round of the Python heap, roughly
    if est * args.heap_rounds <= args.heap_max_ms:
        rec["heap_build_ms"] = time_heap(lp, ids, roots, budget, args.heap_rounds)
    goal = GOALS_MS.get((bs, budget))
    if goal is not None:
        rec["goal_ms"] = goal
        rec["goal_met"] = rec["triton_round_ms"] <= goal
    return rec


def head_weight(hidden_size: int, vocab: int, dev) -> torch.Tensor:
    """[V, H] bf16 stand-in LM-head weight, made on the device (Qwen3-8B's is 1.2 GB)."""
    gen = torch.Generator(device=dev).manual_seed(hidden_size * 7 + vocab)
    weight = torch.randn(vocab, hidden_size, generator=gen, device=dev, dtype=torch.bfloat16)
    return weight.mul_(hidden_size**-0.5)


def bench_head(name: str, weight: torch.Tensor, bs: int, args) -> dict:
    """One head record: ``DraftTopKHead`` (tp 1) over a block's hidden states [bs * L, H] bf16, as the draft
    graph runs it: positions 1..L-1 (bs * (L-1) tokens) through the [V, H] bf16 LM head -> top-K."""
    vocab, hidden_size = weight.shape
    gen = torch.Generator(device=weight.device).manual_seed(bs)
    hidden = torch.randn(bs * args.L, hidden_size, generator=gen, device=weight.device, dtype=torch.bfloat16)
    head = DraftTopKHead(
        weight=weight, block_size=args.L, topk=args.K, num_org=vocab, org_vocab_start=0, max_bs=bs
    )
    head(hidden)
    log_probs, ids = head.read(bs)  # [bs, L-1, K] float32, int64
    rec = {"model": name, "hidden": hidden_size, "vocab": vocab, "bs": bs, "tokens": bs * (args.L - 1)}
    rec["sorted_log_probs"] = bool((log_probs <= 0).all() and (log_probs[..., :-1] >= log_probs[..., 1:]).all())
    rec["ids_in_vocab"] = bool(((ids >= 0) & (ids < vocab)).all())
    rec["head_ms"] = time_graph(lambda: head(hidden), args.iters)
    return rec


def environment() -> dict:
    env = {
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except Exception as exc:  # noqa: BLE001
        env["triton"] = f"unavailable: {exc!r}"
    return env


def _guarded(fn, key: dict) -> dict:
    """fn() -> record; an exception becomes a record with the error (the other configs still run)."""
    t0 = time.perf_counter()
    try:
        rec = fn()
    except Exception as exc:  # noqa: BLE001 - keep the other configs; record the error
        rec = {**key, "error": repr(exc), "traceback": traceback.format_exc()[-2000:]}
    rec["wall_s"] = round(time.perf_counter() - t0, 2)
    return rec


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join("benchmark", "results", "bench_tree.json"))
    p.add_argument("--bs", type=_ints, default=[1, 8, 32, 64])
    p.add_argument("--budgets", type=_ints, default=[16, 64, 256, 512])
    p.add_argument("--L", type=int, default=16, help="block size: depth limit L-1")
    p.add_argument("--K", type=int, default=8)
    p.add_argument("--vocab", type=int, default=4096, help="vocab of the synthetic draft top-K")
    p.add_argument("--prefix-len", type=int, default=1024, help="KV prefix per request (FULL_MASK width)")
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--heap-rounds", type=int, default=3)
    p.add_argument("--heap-max-ms", type=float, default=3000.0, help="skip heaps estimated slower than this")
    p.add_argument("--skip-torch-path", action="store_true")
    p.add_argument("--head-shapes", type=_head_shapes, default=_head_shapes(HEAD_SHAPES),
                   help=f"draft head shapes, name:H:V,... (default {HEAD_SHAPES}); empty: skip the head")
    p.add_argument("--quick", action="store_true", help="bs 1,64 x budget 64,512, fewer iterations")
    args = p.parse_args(argv)
    if args.quick:
        args.bs, args.budgets, args.iters = [1, 64], [64, 512], 50
    return args


def print_table(result) -> None:
    def ms(r, key):
        return f"{r[key]:.4f}" if key in r else "-"

    print(f"{'bs':>4} {'budget':>6} {'round':>8} {'build':>8} {'bitonic':>8} {'merge':>8} {'topo':>8} "
          f"{'acc+com':>8} {'accept':>8} {'torch':>8} {'heap':>9}")
    for r in result["results"]:
        if "error" in r:
            print(f"{r['bs']:>4} {r['budget']:>6} ERROR {r['error'][:80]}")
            continue
        print(" ".join([f"{r['bs']:>4} {r['budget']:>6}"] + [
            f"{ms(r, k):>{w}}" for k, w in (
                ("triton_round_ms", 8), ("triton_build_ms", 8), ("triton_build_bitonic_ms", 8),
                ("triton_build_merge_ms", 8), ("triton_topology_ms", 8), ("triton_accept_commit_ms", 8),
                ("triton_accept_greedy_ms", 8), ("torch_round_ms", 8), ("heap_build_ms", 9))
        ]))
    for r in result["head_results"]:
        tail = f"ERROR {r['error'][:80]}" if "error" in r else f"{ms(r, 'head_ms')} ms"
        print(f"head {r['model']} H {r['hidden']} V {r['vocab']} bs {r['bs']}: {tail}")


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_tree: needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(0)
    result = {"environment": environment(), "config": {k: v for k, v in vars(args).items() if k != "out"}}
    result["round"] = (
        "build_tree + build_verify_topology (FULL_MASK, positions, retrieve links; no compact mask) "
        "+ greedy_accept_commit (the worker's fused accept + commit), one CUDA graph, mean of back-to-back replays"
    )
    result["round_parts"] = list(ROUND_PARTS)
    result["head"] = "DraftTopKHead (tp 1), before the round in the draft graph; not part of triton_round_ms"
    result["results"], result["head_results"] = [], []
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    t_start = time.perf_counter()

    def save():  # after every record: partial results survive a timeout
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)

    for budget in args.budgets:
        for bs in args.bs:
            key = {"bs": bs, "budget": budget}
            rec = _guarded(lambda: bench_config(bs, budget, args, gen, dev), key)
            torch.cuda.empty_cache()  # the PyTorch path's FULL_MASK temporaries are large at bs 64
            result["results"].append(rec)
            print(json.dumps(rec), flush=True)
            save()
    for name, hidden_size, vocab in args.head_shapes:
        weight = head_weight(hidden_size, vocab, dev)
        for bs in args.bs:
            key = {"model": name, "hidden": hidden_size, "vocab": vocab, "bs": bs}
            rec = _guarded(lambda: bench_head(name, weight, bs, args), key)
            result["head_results"].append(rec)
            print(json.dumps(rec), flush=True)
            save()
        del weight
        torch.cuda.empty_cache()
    result["total_wall_s"] = round(time.perf_counter() - t_start, 1)
    result["goals"] = [r for r in result["results"] if "goal_ms" in r]
    save()
    failed = sum("error" in r for r in result["results"] + result["head_results"])
    print(f"bench_tree: wrote {args.out} ({len(result['results'])} round configs, "
          f"{len(result['head_results'])} head configs, {failed} failed)")
    print_table(result)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
