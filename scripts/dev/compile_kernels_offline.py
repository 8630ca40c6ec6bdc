"""Compile every Triton kernel of sglang_ddtree offline (no GPU) for sm_90, sm_100 and sm_120.

Kernels: every ``JITFunction`` in the modules of ``sglang_ddtree.tree.kernels`` and
``sglang_ddtree.worker.kernels``, found by import. Specialisations: the launches the real wrappers make at
the worker's launch sites (``tree_api.build_tree`` / ``verify_topology``, ``draft_head.topk_lse``,
``kv_commit.greedy_accept_commit`` / ``AcceptedKVMover``, ``sampling.draw_rows``, fa3's fused tree attention
``worker.tree_attention``, flashinfer's tree-mask packing ``worker.flashinfer_plan.pack_tree_mask`` and its
split-KV work-list rewrite ``rewrite_split_layout``) for the Qwen3-8B shape (vocab 151936, bf16 LM head, 36
layers x K/V = 72 KV buffers of 2048-byte rows, block size 16)
at budgets 1, 15, 16, 64, 256, 512 and top-K 1, 4, 8 (top-K <= budget, as the config requires), the draft head on
a vocab-parallel shard (tp 2, 4, 8), and ``tree.accept_greedy`` (a package op the round does not launch).
The wrappers run on CPU tensors with ``use_triton`` patched to True and each kernel's ``run`` replaced by a
recorder; each recorded launch goes through Triton's own launch-time binder for the target, so signature,
constexprs, divisibility attributes and num_warps are what a launch on that GPU compiles. Each distinct
specialisation is compiled with ``triton.compile`` for ``GPUTarget("cuda", arch, 32)``; registers, spills
and stack come from the ``ptxas -v`` log of Triton's own ptxas run (the bundled ``ptxas``, from sm_100
``ptxas-blackwell``, for Triton's ``sm_XXa`` target), shared memory and warps from the compiled kernel's
metadata. The hidden size (4096) reaches no kernel: the LM-head matmul is PyTorch's, the top-K kernels
read its [T, V] logits.

A JITFunction that no recorded launch reaches (directly or as a helper a launched kernel calls) is an
error: a new kernel needs a case here. An arch whose ptxas is missing or cannot assemble for it is
recorded with the reason and skipped, not counted as a failure of our kernels.

Run:  python scripts/dev/compile_kernels_offline.py --arch 90,100,120 \
          --out benchmark/results/kernels_offline_compile.json
      [--smoke] (one small specialisation per kernel) [--jobs N] [--fail-on-spill]
Exit status 1 if a kernel has no specialisation or fails to compile on an arch whose ptxas is available.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import datetime
import importlib
import io
import json
import multiprocessing as mp
import os
import pkgutil
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import triton  # noqa: E402
from triton import knobs  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.backends.nvidia import compiler as nv  # noqa: E402
from triton.compiler import ASTSource, make_backend  # noqa: E402
from triton.runtime.jit import JITFunction, create_function_from_signature  # noqa: E402

KERNEL_PACKAGES = ("sglang_ddtree.tree.kernels", "sglang_ddtree.worker.kernels")
ARCH_GPUS = {90: "H100 / H200", 100: "B200", 120: "RTX PRO 6000 Blackwell"}

# Qwen3-8B serving shape
VOCAB = 151936
KV_LAYERS = 36  # K and V buffers per layer: 72 data_ptrs
KV_ROW_BYTES = 2048  # 8 KV heads x 128 x bf16
BLOCK_SIZE = 16  # draft block L; the tree's max depth is L - 1
BUDGETS = (1, 15, 16, 64, 256, 512)
TOPKS = (1, 4, 8)
TP_SHARDS = (2, 4, 8)  # vocab-parallel LM head: each rank's top-K over V / tp columns
SMOKE = dict(budget=16, topk=4, prefix_dtype=torch.int64)  # one small launch of every kernel


def discover_kernels() -> dict:
    """Every JITFunction defined in the kernel packages' modules, keyed ``module:name``."""
    found = {}
    for pkg_name in KERNEL_PACKAGES:
        pkg = importlib.import_module(pkg_name)
        for info in pkgutil.iter_modules(pkg.__path__):
            mod = importlib.import_module(f"{pkg_name}.{info.name}")
            for name, obj in vars(mod).items():
                if isinstance(obj, JITFunction) and obj.fn.__module__ == mod.__name__:
                    found[f"{mod.__name__}:{name}"] = obj
    return found


def _key(fn: JITFunction) -> str:
    return f"{fn.fn.__module__}:{fn.fn.__name__}"


def callees(fn: JITFunction) -> set:
    """The JITFunctions ``fn`` calls by a global name (its helpers)."""
    out = set()
    for name in fn.fn.__code__.co_names:
        obj = fn.fn.__globals__.get(name)
        if isinstance(obj, JITFunction) and obj is not fn:
            out.add(_key(obj))
    return out


# ---- the launch sites, run on CPU with recorders in place of the kernels ----------------------------

@dataclass
class Launch:
    kernel: JITFunction
    args: tuple
    kwargs: dict
    case: str


class _Qwen3KVPool:
    """What AcceptedKVMover reads of SGLang's MHATokenToKVPool at the Qwen3-8B shape (2 slots per buffer)."""

    def __init__(self):
        self.device = "cuda"
        self.layer_num = KV_LAYERS
        row = (KV_ROW_BYTES // 2 // 128, 128)
        self.k_buffer = [torch.empty(2, *row, dtype=torch.bfloat16) for _ in range(KV_LAYERS)]
        self.v_buffer = [torch.empty(2, *row, dtype=torch.bfloat16) for _ in range(KV_LAYERS)]
        self.data_ptrs = torch.empty(2 * KV_LAYERS, dtype=torch.uint64)
        self.data_strides = torch.full((2 * KV_LAYERS,), KV_ROW_BYTES, dtype=torch.int64)
        self._kv_copy_config = {}
        self.use_hnd = False
        self.use_native_move_kv_cache = False
        self.k_scale_buffer = None


def worker_round(budget: int, topk: int, prefix_dtype: torch.dtype) -> None:
    """The kernel launches of one DDTREE decode round (worker._decode_round), bs = 2, in its order."""
    from sglang_ddtree.config import DDTreeConfig
    from sglang_ddtree.worker import draft_head, kv_commit, sampling, tree_api

    cfg = DDTreeConfig(budget=budget, topk=topk, block_size=BLOCK_SIZE)  # validates topk <= budget
    bs, depth, n, width = 2, BLOCK_SIZE - 1, cfg.num_verify_tokens, cfg.accept_width
    # DRAFT: the LM head's logits [bs * (L-1), V] in the weight's dtype -> top-K + logsumexp
    rows = bs * depth
    logits = torch.empty(rows, VOCAB, dtype=torch.bfloat16)
    val, ids = torch.empty(rows, topk), torch.empty(rows, topk, dtype=torch.int64)
    draft_head.topk_lse(logits, topk, val, ids, torch.empty(rows))
    # BUILD + VERIFY inputs
    tree = tree_api.build_tree(val.view(bs, depth, topk), ids.view(bs, depth, topk), budget)
    tokens = tree_api.fill_root(tree, torch.zeros(bs, dtype=torch.int64))
    prefix = torch.tensor([700, 5], dtype=prefix_dtype)
    tree_api.verify_topology(tree, prefix, 705 + 16)  # a host bound >= sum(prefix), as _HostLens gives
    # ACCEPT + COMMIT: targets are the argmax (greedy) or one draw per node (T > 0), [bs, N] int64
    sampling.draw_rows(torch.empty(1, VOCAB))  # T > 0: filtered probs [bs * N, V] float32 (1 row: grid only)
    targets = torch.empty(bs, n, dtype=torch.int64)
    verify_loc = torch.empty(bs * n, dtype=torch.int64).view(bs, n)
    commit = kv_commit.greedy_accept_commit(tree, tokens, targets, verify_loc, prefix, width)
    kv_commit.AcceptedKVMover(_Qwen3KVPool())(commit, width)


def fa3_tree_attention(budget: int, dtype: torch.dtype = torch.bfloat16) -> None:
    """fa3's fused tree attention (``worker.fa3_tree``): the round's ancestor bits and one layer's tree part +
    merge at the Qwen3-8B heads (32 query / 8 KV heads of 128), bs = 2, FA3's [Hq, T] LSE layout."""
    from sglang_ddtree.worker import tree_attention

    bs, n = 2, budget + 1
    t = bs * n
    parents = torch.full((bs, n), -1, dtype=torch.int64)
    bits = tree_attention.ancestor_bits(parents, min(budget, BLOCK_SIZE - 1))
    qkv = torch.empty(t, (32 + 2 * 8) * 128, dtype=dtype)  # q, k, v as views of one projection, as in the model
    q = qkv[:, : 32 * 128].contiguous().view(t, 32, 128)
    k = qkv[:, 32 * 128 : 40 * 128].view(t, 8, 128)
    v = qkv[:, 40 * 128 :].view(t, 8, 128)
    o = torch.empty(t, 32, 128, dtype=dtype)
    tree_attention.tree_attention_merge(q, k, v, bits, o, torch.empty(32, t), num_rows=n, sm_scale=128 ** -0.5,
                                        out=o)


def flashinfer_mask_pack(budget: int, bs: int = 4) -> None:
    """flashinfer's tree mask packed on the device (``worker.flashinfer_plan.pack_tree_mask``, with
    SGLANG_DDTREE_FLASHINFER_PLAN=1): ``bs`` requests of budget + 1 rows over 300 prefix keys + the tree."""
    from sglang_ddtree.worker import flashinfer_plan

    n = budget + 1
    qo = torch.arange(0, (bs + 1) * n, n, dtype=torch.int32)
    kv = torch.arange(0, bs + 1, dtype=torch.int32) * (300 + n)
    mask = torch.empty(bs * n * (300 + n), dtype=torch.bool)
    flashinfer_plan.pack_tree_mask(mask, qo, kv, torch.empty(bs * n * (300 + n) // 8 + bs, dtype=torch.uint8),
                                   torch.empty(bs + 1, dtype=torch.int32), (n * (300 + n) + 7) // 8)


def flashinfer_split_layout(budget: int, bs: int = 4) -> None:
    """the split-KV work list rewritten from the device key counts after the sync-free plan's schedule
    (``worker.flashinfer_plan.rewrite_split_layout``): ``bs`` requests of budget + 1 rows, 5 query tiles each."""
    from sglang_ddtree.worker import flashinfer_plan

    n, padded = budget + 1, 264
    i32 = dict(dtype=torch.int32)
    lay = flashinfer_plan.SplitLayout(torch.empty(padded, **i32), torch.empty(padded, **i32),
                                      torch.empty(padded, **i32), torch.empty(padded, dtype=torch.uint8),
                                      torch.empty(bs + 1, **i32), torch.empty(bs * n + 1, **i32),
                                      torch.empty(1, **i32), n, 5)
    flashinfer_plan.rewrite_split_layout(torch.arange(0, bs + 1, **i32) * (300 + n), lay)


def draft_head_shard(topk: int, tp: int, select: str = "all") -> None:
    """``draft_head.topk_lse`` on one rank's vocabulary shard (vocab-parallel LM head, V / tp columns); ``select``
    as it takes it (``threshold``: the stats / threshold / select kernels instead of the slice kernel)."""
    from sglang_ddtree.worker import draft_head

    rows = 2 * (BLOCK_SIZE - 1)
    logits = torch.empty(rows, VOCAB // tp, dtype=torch.bfloat16)
    draft_head.topk_lse(logits, topk, torch.empty(rows, topk), torch.empty(rows, topk, dtype=torch.int64),
                        torch.empty(rows), select=select)


def tree_accept(budget: int) -> None:
    """``tree.accept_greedy`` on a builder-shaped tree (max depth L - 1): a package op, not in the round."""
    from sglang_ddtree.tree import Tree, accept_greedy

    tree = Tree.make_dummy(2, budget, "cpu", max_depth=BLOCK_SIZE - 1)
    accept_greedy(tree, torch.empty(2, budget + 1, dtype=torch.int64))


def cases(smoke: bool) -> list:
    """(label, thunk) for every recorded call."""
    if smoke:
        s = SMOKE
        return [(f"worker round budget={s['budget']} topk={s['topk']} prefix={s['prefix_dtype']}",
                 lambda: worker_round(**s)),
                (f"tree.accept_greedy budget={s['budget']}", lambda: tree_accept(s["budget"])),
                (f"fa3 tree attention budget={s['budget']}", lambda: fa3_tree_attention(s["budget"])),
                (f"flashinfer mask pack budget={s['budget']}", lambda: flashinfer_mask_pack(s["budget"])),
                (f"flashinfer split layout budget={s['budget']}", lambda: flashinfer_split_layout(s["budget"])),
                (f"draft head threshold select topk={s['topk']}", lambda: draft_head_shard(s["topk"], 1, "threshold"))]
    out = []
    for budget in BUDGETS:
        for topk in (k for k in TOPKS if k <= budget):
            for pdt in (torch.int64, torch.int32):  # SGLang's seq_lens: int64 (int32 also accepted)
                out.append((f"worker round budget={budget} topk={topk} prefix={pdt}",
                            lambda b=budget, k=topk, p=pdt: worker_round(b, k, p)))
        out.append((f"tree.accept_greedy budget={budget}", lambda b=budget: tree_accept(b)))
        for dt in (torch.bfloat16, torch.float16):
            out.append((f"fa3 tree attention budget={budget} {dt}", lambda b=budget, d=dt: fa3_tree_attention(b, d)))
    for bs in (1, 4, 48, 256):  # the kernel's request block (B_POW2) follows the graph's batch size
        out.append((f"flashinfer mask pack budget=15 bs={bs}", lambda b=bs: flashinfer_mask_pack(15, b)))
        out.append((f"flashinfer split layout budget=15 bs={bs}", lambda b=bs: flashinfer_split_layout(15, b)))
    for tp in TP_SHARDS:  # the merge pass's tile follows the shard's slice count
        for topk in TOPKS:
            out.append((f"draft head tp={tp} topk={topk}", lambda k=topk, t=tp: draft_head_shard(k, t)))
    for tp in (1, *TP_SHARDS):
        for topk in TOPKS:
            out.append((f"draft head threshold select tp={tp} topk={topk}",
                        lambda k=topk, t=tp: draft_head_shard(k, t, "threshold")))
    return out


def record_launches(kernels: dict, case_list: list) -> list:
    """Run each case with use_triton -> True and every kernel's launch recorded instead of run."""
    from sglang_ddtree.tree import _common, accept, build, topology
    from sglang_ddtree.worker import flashinfer_plan, tree_attention

    launches, label = [], [""]

    def recorder(kernel):
        def run(*args, grid, warmup, **kwargs):
            launches.append(Launch(kernel, args, kwargs, label[0]))
        return run

    with contextlib.ExitStack() as stack:
        for mod in (_common, accept, build, topology, tree_attention, flashinfer_plan):
            stack.enter_context(mock.patch.object(mod, "use_triton", lambda *a, **k: True))
        for kernel in kernels.values():
            stack.enter_context(mock.patch.object(kernel, "run", recorder(kernel), create=True))
        for label[0], thunk in case_list:
            thunk()
    return launches


def coverage_problems(kernels: dict, launches: list) -> list:
    """Kernels no recorded launch reaches, directly or through the helpers launched kernels call."""
    reached, todo = set(), [_key(x.kernel) for x in launches]
    while todo:
        k = todo.pop()
        if k not in reached:
            reached.add(k)
            todo.extend(callees(kernels[k]) if k in kernels else ())
    return [f"{k}: no specialisation listed (no case in {os.path.basename(__file__)} launches it or a kernel "
            f"that calls it)" for k in sorted(set(kernels) - reached)]


# ---- specialise and compile -------------------------------------------------------------------------

@dataclass
class Spec:
    arch: int
    kernel: JITFunction
    signature: dict
    constexprs: dict
    attrs: dict
    options: dict
    cases: list = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.kernel.fn.__name__

    def named_constexprs(self) -> dict:
        return {self.kernel.arg_names[k[0]]: v for k, v in self.constexprs.items()}

    def arg_desc(self) -> dict:
        """Non-constexpr argument -> 'dtype' or 'dtype:attributes' (e.g. divisibility 16)."""
        attrs = {self.kernel.arg_names[k[0]]: _attr_text(v) for k, v in self.attrs.items()}
        return {k: f"{v}:{attrs[k]}" if attrs.get(k) else str(v) for k, v in self.signature.items() if v != "constexpr"}


def _attr_text(attr) -> str:
    """[['tt.divisibility', 16]] -> 'd16' (pointer 16-byte aligned / integer divisible by 16)."""
    return ",".join(f"d{v}" if name == "tt.divisibility" else f"{name}={v}" for name, v in attr)


def specialise(launches: list, arch: int) -> list:
    """Distinct specialisations of the launches on ``arch``, as JITFunction.run binds them (no driver)."""
    backend = make_backend(GPUTarget("cuda", arch, 32))
    specs, index = [], {}
    for ln in launches:
        kwargs = dict(ln.kwargs, debug=bool(ln.kernel.debug or knobs.runtime.debug),
                      instrumentation_mode=knobs.compilation.instrumentation_mode)
        binder = create_function_from_signature(ln.kernel.signature, ln.kernel.params, backend)
        bound, specialization, options = binder(*ln.args, **kwargs)
        options, signature, constexprs, attrs = ln.kernel._pack_args(backend, kwargs, bound, specialization, options)
        opts = options.__dict__
        key = (_key(ln.kernel), repr(signature), repr(sorted(constexprs.items())), repr(sorted(attrs.items())),
               repr(sorted(opts.items())))
        if key not in index:
            index[key] = len(specs)
            specs.append(Spec(arch, ln.kernel, signature, constexprs, attrs, opts))
        specs[index[key]].cases.append(ln.case)
    return specs


def ptxas_for(arch: int) -> dict:
    """The ptxas Triton uses for ``arch``, its version, and whether it assembles for Triton's target."""
    gpu_name = nv.sm_arch_from_capability(arch)
    info = {"gpu_name": gpu_name, "path": None, "cuda_version": None, "available": False, "reason": None}
    try:
        tool = nv.get_ptxas(arch)
    except RuntimeError as e:
        info["reason"] = f"bundled ptxas not found: {e}"
        return info
    info["path"], info["cuda_version"] = tool.path, tool.version
    ptx = nv.ptx_get_version(tool.version)
    src = (f".version {ptx // 10}.{ptx % 10}\n.target {gpu_name}\n.address_size 64\n"
           ".visible .entry probe()\n{\nret;\n}\n")
    with tempfile.TemporaryDirectory() as td:
        path = os.path.join(td, "probe.ptx")
        with open(path, "w") as f:
            f.write(src)
        r = subprocess.run([tool.path, f"--gpu-name={gpu_name}", path, "-o", path + ".cubin"],
                           capture_output=True, text=True)
    if r.returncode != 0:
        info["reason"] = f"ptxas {tool.version} cannot assemble for {gpu_name}: {r.stderr.strip()[-500:]}"
    else:
        info["available"] = True
    return info


def parse_ptxas_log(log: str) -> dict:
    out = {"regs": None, "spill_stores": None, "spill_loads": None, "stack": None}
    m = re.search(r"Used (\d+) registers", log)
    if m:
        out["regs"] = int(m.group(1))
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if m:
        out["stack"], out["spill_stores"], out["spill_loads"] = map(int, m.groups())
    return out


_SPECS: list = []  # read by the forked compile workers
_CACHE_DIR = [""]


def _compile_job(i: int):
    spec = _SPECS[i]
    knobs.cache.dir = _CACHE_DIR[0]
    knobs.compilation.always_compile = True  # a cache hit would skip ptxas and its log
    knobs.nvidia.dump_ptxas_log = True  # make_cubin prints the ptxas -v log to stdout
    t0 = time.time()
    res = {"ok": False, "error": None, "regs": None, "spill_stores": None, "spill_loads": None, "stack": None,
           "shared": None, "num_warps": spec.options["num_warps"], "ptx": None}
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            out = triton.compile(ASTSource(spec.kernel, spec.signature, spec.constexprs, spec.attrs),
                                 target=GPUTarget("cuda", spec.arch, 32), options=spec.options)
        res.update(parse_ptxas_log(log.getvalue()))
        res["shared"], res["num_warps"] = out.metadata.shared, out.metadata.num_warps
        m = re.search(r"^\.version (\S+)\s*\n\.target (\S+)", out.asm["ptx"], flags=re.MULTILINE)
        res["ptx"] = f"PTX {m.group(1)} {m.group(2)}" if m else None
        res["ok"] = res["regs"] is not None
        if not res["ok"]:
            res["error"] = "no ptxas info in the log: " + log.getvalue()[-500:]
    except Exception as e:  # noqa: BLE001 - every failure is a result
        cause = f" | cause: {e.__cause__!r}"[-1500:] if e.__cause__ is not None else ""
        res["error"] = f"{type(e).__name__}: {str(e).strip()[-3000:]}{cause}"
    res["compile_s"] = round(time.time() - t0, 1)
    return i, res


def _cost(spec: Spec) -> int:  # longest first: the build kernel's tiles dominate
    ce = spec.named_constexprs()
    return int(ce.get("BLOCK_B", 0)) * int(ce.get("BLOCK_K", 1)) + int(ce.get("BLOCK_N", 0))


def compile_all(specs: list, jobs: int) -> list:
    """Compile every spec in forked workers; results in spec order."""
    _SPECS[:] = specs
    results = [None] * len(specs)
    with tempfile.TemporaryDirectory() as cache:
        _CACHE_DIR[0] = cache
        order = sorted(range(len(specs)), key=lambda i: -_cost(specs[i]))
        with cf.ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=mp.get_context("fork")) as ex:
            futures = {ex.submit(_compile_job, i): i for i in order}
            for done, fut in enumerate(cf.as_completed(futures), 1):
                i = futures[fut]
                try:
                    res = fut.result()[1]
                except Exception as e:  # noqa: BLE001 - a worker that died (e.g. a crashing compiler)
                    res = {"ok": False, "error": f"compile worker died: {e!r}", "regs": None, "spill_stores": None,
                           "spill_loads": None, "stack": None, "shared": None, "ptx": None, "compile_s": None,
                           "num_warps": specs[i].options["num_warps"]}
                results[i] = res
                print(f"  [{done}/{len(specs)}] {specs[i].name} sm_{specs[i].arch}: "
                      f"{'ok' if res['ok'] else 'FAILED'} ({res['compile_s']}s)", flush=True)
    return results


# ---- report -----------------------------------------------------------------------------------------

def spec_label(spec: Spec, varying: set) -> str:
    """Constexprs, then the arguments whose dtype / attributes differ between the kernel's specs."""
    ce = " ".join(f"{k}={v}" for k, v in spec.named_constexprs().items())
    args = " ".join(f"{k}:{v}" for k, v in spec.arg_desc().items() if k in varying)
    return f"{ce} {args}".strip()


def _varying(specs: list) -> dict:
    per_kernel = {}
    for s in specs:
        per_kernel.setdefault(s.name, []).append(s.arg_desc())
    return {name: {k for k in set().union(*descs) if len({d.get(k) for d in descs}) > 1}
            for name, descs in per_kernel.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="90,100,120", help="comma-separated compute capabilities (90, 100, 120)")
    ap.add_argument("--out", help="write every result here (JSON)")
    ap.add_argument("--smoke", action="store_true", help="one small specialisation per kernel (the CPU test)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--fail-on-spill", action="store_true", help="exit 1 on spill stores / loads too")
    a = ap.parse_args(argv)
    archs = [int(x) for x in a.arch.split(",")]

    kernels = discover_kernels()
    launches = record_launches(kernels, cases(a.smoke))
    problems = coverage_problems(kernels, launches)
    for p in problems:
        print("ERROR", p, flush=True)
    ptxas = {arch: ptxas_for(arch) for arch in archs}
    specs = []
    for arch in archs:
        info = ptxas[arch]
        print(f"sm_{arch} ({ARCH_GPUS.get(arch, '?')}): ptxas {info['cuda_version']} {info['path']} -> "
              f"{info['gpu_name']}: {'available' if info['available'] else 'SKIPPED: ' + str(info['reason'])}",
              flush=True)
        if info["available"]:
            specs += specialise(launches, arch)
    print(f"triton {triton.__version__}; {len(kernels)} JIT functions, {len(launches)} recorded launches -> "
          f"{len(specs)} compiles on {len(archs)} arch(s), {a.jobs} jobs", flush=True)
    t0 = time.time()
    results = compile_all(specs, a.jobs) if specs else []

    varying = _varying(specs)
    labels = [spec_label(s, varying.get(s.name, set())) for s in specs]
    width = max((len(x) for x in labels), default=14)
    print(f"\n{'kernel':30} {'specialisation':{width}} {'arch':6} {'ok':3} {'regs':>4} {'spills':>7} {'shared':>6} "
          f"{'warps':>5}")
    rows = []
    order = sorted(range(len(specs)), key=lambda i: (specs[i].name, tuple(specs[i].named_constexprs().values()),
                                                     labels[i], specs[i].arch))
    for spec, label, res in ((specs[i], labels[i], results[i]) for i in order):
        print(f"{spec.name:30} {label:{width}} sm_{spec.arch:<3} {'ok' if res['ok'] else 'ERR':3} "
              f"{res['regs'] if res['regs'] is not None else '-':>4} "
              f"{(str(res['spill_stores']) + '/' + str(res['spill_loads'])) if res['ok'] else '-':>7} "
              f"{res['shared'] if res['shared'] is not None else '-':>6} {res['num_warps']:>5}")
        if res["error"]:
            print("    " + res["error"][:800].replace("\n", "\n    "))
        rows.append({
            "kernel": _key(spec.kernel), "arch": spec.arch, "gpu_name": ptxas[spec.arch]["gpu_name"],
            "specialisation": label, "constexprs": spec.named_constexprs(),
            "signature": {k: str(v) for k, v in spec.signature.items()},
            "attrs": {spec.kernel.arg_names[k[0]]: str(v) for k, v in spec.attrs.items()},
            **res, "cases": spec.cases,
        })
    summary = {}
    for arch in archs:
        mine = [r for r in rows if r["arch"] == arch]
        summary[f"sm_{arch}"] = {
            "ptxas_available": ptxas[arch]["available"], "compiled": len(mine),
            "failed": sorted({f"{r['kernel']} [{r['specialisation']}]" for r in mine if not r["ok"]}),
            "spilling": sorted(f"{r['kernel']} [{r['specialisation']}] {r['spill_stores']}/{r['spill_loads']} B"
                               for r in mine if r["ok"] and (r["spill_stores"] or r["spill_loads"])),
            "max_regs": max((r["regs"] or 0 for r in mine), default=None),
        }
    n_fail = sum(len(s["failed"]) for s in summary.values())
    n_spill = sum(len(s["spilling"]) for s in summary.values())
    print(f"\n{len(rows)} compiles in {time.time() - t0:.0f}s: {n_fail} failed, {n_spill} spilling; "
          f"{len(problems)} kernels without a specialisation")
    for arch, s in summary.items():
        print(f"  {arch}: {s['compiled']} compiled, {len(s['failed'])} failed, {len(s['spilling'])} spilling, "
              f"max regs {s['max_regs']}" + ("" if s["ptxas_available"] else " (ptxas unavailable: skipped)"))
    if a.out:
        helpers = {k: sorted(callees(f)) for k, f in kernels.items() if callees(f)}
        doc = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "python " + " ".join([os.path.relpath(__file__, ROOT)] + list(argv or sys.argv[1:])),
            "triton": triton.__version__, "torch": torch.__version__, "python": platform.python_version(),
            "ptxas": {f"sm_{k}": v for k, v in ptxas.items()},
            "shapes": {"vocab": VOCAB, "lm_head_dtype": "bfloat16", "kv_buffers": 2 * KV_LAYERS,
                       "kv_row_bytes": KV_ROW_BYTES, "block_size": BLOCK_SIZE, "budgets": list(BUDGETS),
                       "topks": list(TOPKS), "tp_shards": list(TP_SHARDS), "smoke": a.smoke},
            "kernels": sorted(kernels), "calls": helpers, "coverage_problems": problems,
            "summary": summary, "results": rows,
        }
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1, default=str)
            f.write("\n")
    failed = bool(problems or n_fail or (a.fail_on_spill and n_spill))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
