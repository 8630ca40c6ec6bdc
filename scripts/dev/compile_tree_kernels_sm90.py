"""Compile every Triton kernel of ``sglang_ddtree.tree`` for sm_90 (H200) offline and report ptxas stats.

What it checks: each specialisation the real wrappers launch (``build.build_tree_triton``,
``topology.build_verify_topology``, ``accept.accept_greedy``) over budgets 1..1024, K up to 64, L - 1 up
to 15, both build strategies (bitonic / merge, plus "auto"), with and without root tokens, with and
without the tree / FULL masks and the ancestor bits (``bits_out``), custom-mask buffers at address mod 16 = 0 / 1 / 4, int32 / int64 seq lens
and int32 / int64 target tokens. The wrappers run unchanged on CPU tensors with ``use_triton`` patched to
True and each ``kernel[grid](...)`` replaced by a recorder; the recorded arguments then go through
Triton's own JIT binder (``create_function_from_signature`` + ``JITFunction._pack_args``) for a CUDA
sm_90 backend, so signature, pointer dtypes, constexprs, divisibility attributes and num_warps are
exactly what a launch on the H200 would compile. Each distinct specialisation is compiled with
``triton.compile(..., target=GPUTarget("cuda", 90, 32))`` and its PTX run through the bundled
``ptxas -v --gpu-name sm_90a`` for registers / spills / stack.

Needs no GPU (no CUDA driver is touched): Triton + torch (CPU) are enough.

Run:  python scripts/dev/compile_tree_kernels_sm90.py [--quick] [--jobs N] [--only build|topology|accept]
      [--json out.json]
Exit status 1 if any specialisation fails to compile or spills (spill stores/loads > 0).
Note: the device runs Triton 3.6; this checks with whatever Triton is installed here.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

import sglang_ddtree.tree.accept as accept_mod  # noqa: E402
import sglang_ddtree.tree.build as build_mod  # noqa: E402
import sglang_ddtree.tree.kernels.accept as k_accept  # noqa: E402
import sglang_ddtree.tree.kernels.build_tree as k_build  # noqa: E402
import sglang_ddtree.tree.kernels.topology as k_topo  # noqa: E402
import sglang_ddtree.tree.topology as topo_mod  # noqa: E402
from sglang_ddtree.tree.metadata import Tree  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
PTXAS = triton.__file__.replace("__init__.py", "backends/nvidia/bin/ptxas")
BUDGETS = (1, 2, 15, 16, 63, 64, 65, 255, 256, 300, 511, 512, 1024)

BUILD_KS = None
RECORDED: list = []  # (kernel, args, kwargs, case description)
_CASE = [""]


class _Recorder:
    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            RECORDED.append((self.kernel, args, kwargs, _CASE[0]))

        return launch


def _patch():
    for mod in (build_mod, topo_mod, accept_mod):
        mod.use_triton = lambda *a, **k: True
    k_build.ddtree_build_kernel = _Recorder(k_build.ddtree_build_kernel)
    k_topo.ddtree_topology_kernel = _Recorder(k_topo.ddtree_topology_kernel)
    k_accept.ddtree_accept_kernel = _Recorder(k_accept.ddtree_accept_kernel)


def _cases_build(quick):
    bs = 2
    ks = BUILD_KS or ((1, 4, 8) if quick else (1, 4, 8, 16, 64))
    depths = (15,) if quick else (1, 4, 15)
    for budget in BUDGETS:
        for k in ks:
            for depth in depths:
                for has_root in (True, False):
                    if (depth != 15 or quick and budget not in (16, 512)) and not has_root:
                        continue  # HAS_ROOT only changes one scalar load; both roots at L - 1 = 15
                    lp = torch.zeros(bs, depth, k, dtype=torch.float32)
                    ids = torch.zeros(bs, depth, k, dtype=torch.int64)
                    roots = torch.zeros(bs, dtype=torch.int64) if has_root else None
                    for strategy in ("auto", "bitonic", "merge"):
                        # Forced bitonic at K >= 16 with large budgets is no production path (auto picks
                        # merge from budget class 256) and a [BLOCK_K, BLOCK_B] register tile of 16k+.
                        if strategy == "bitonic" and k > 8 and budget > 128:
                            continue
                        _CASE[0] = f"budget={budget} K={k} L-1={depth} root={has_root} strategy={strategy}"
                        build_mod.build_tree_triton(lp, ids, budget, roots, strategy=strategy)


def _cases_topology(quick):
    bs = 2
    for budget in BUDGETS:
        for max_depth in ((15,) if quick else (1, 3, 7, 15)):
            tree = Tree.make_dummy(bs, budget, "cpu", max_depth=max_depth)
            n = budget + 1
            for sdt in (torch.int32, torch.int64):
                seq = torch.tensor([5, 700], dtype=sdt)
                s_sum = int(seq.sum())
                for with_tree in (True, False):
                    _CASE[0] = f"budget={budget} max_depth={max_depth} seq={sdt} tree_mask={with_tree} full=None"
                    topo_mod.build_verify_topology(tree, seq, None, with_tree_mask=with_tree)
                    for off in (0, 1, 4):  # custom_mask_out slice at an aligned / unaligned address
                        numel = topo_mod.full_mask_numel(s_sum, bs, n)
                        buf = torch.zeros(numel + off, dtype=torch.bool)[off:]
                        _CASE[0] = (f"budget={budget} max_depth={max_depth} seq={sdt} tree_mask={with_tree} "
                                    f"full=buf+{off}")
                        topo_mod.build_verify_topology(tree, seq, s_sum, with_tree_mask=with_tree, custom_mask_out=buf)
                        # fa3's fused tree attention: the ancestor bits from the same launch (WRITE_BITS)
                        bits = torch.zeros(bs * n, (n + 31) // 32, dtype=torch.int32)
                        _CASE[0] = (f"budget={budget} max_depth={max_depth} seq={sdt} tree_mask={with_tree} "
                                    f"full=buf+{off} bits")
                        topo_mod.build_verify_topology(tree, seq, s_sum, with_tree_mask=with_tree, custom_mask_out=buf,
                                                       bits_out=bits)


def _cases_accept(quick):
    bs = 2
    for budget in BUDGETS:
        for max_depth in ((15,) if quick else (1, 3, 15)):
            tree = Tree.make_dummy(bs, budget, "cpu", max_depth=max_depth)
            for tdt in (torch.int64, torch.int32):
                _CASE[0] = f"budget={budget} max_depth={max_depth} target={tdt}"
                accept_mod.accept_greedy(tree, torch.zeros(bs, budget + 1, dtype=tdt))


def _specialise(kernel, args, kwargs, backend):
    """Triton's own launch-time specialisation (as JITFunction.run does), without a driver."""
    kwargs = dict(kwargs)
    kwargs["debug"] = False
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound_args, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound_args, specialization, options)
    return options, signature, constexprs, attrs


SPECS: list = []  # (name, kernel, signature, constexprs, attrs, options dict, cases)


def _compile_one(i):
    name, kernel, signature, constexprs, attrs, options, _ = SPECS[i]
    t0 = time.time()
    res = {"ok": False, "regs": None, "spill_st": None, "spill_ld": None, "stack": None, "shared": None,
           "error": None}
    try:
        out = triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=TARGET, options=options)
        res["shared"] = out.metadata.shared
        with tempfile.TemporaryDirectory() as td:
            ptx = os.path.join(td, "k.ptx")
            with open(ptx, "w") as f:
                f.write(out.asm["ptx"])
            r = subprocess.run([PTXAS, "-v", "--gpu-name", "sm_90a", ptx, "-o", os.path.join(td, "k.cubin")],
                               capture_output=True, text=True)
        if r.returncode != 0:
            res["error"] = "ptxas: " + r.stderr.strip()[-2000:]
        else:
            txt = r.stderr
            m = re.search(r"Used (\d+) registers", txt)
            res["regs"] = int(m.group(1)) if m else None
            m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", txt)
            if m:
                res["stack"], res["spill_st"], res["spill_ld"] = map(int, m.groups())
            res["ok"] = True
    except Exception as e:  # noqa: BLE001 - report every failure
        msg = str(e).strip()
        cause = f" | cause: {e.__cause__!r}"[-1500:] if e.__cause__ is not None else ""
        res["error"] = f"{type(e).__name__}: {msg[-3000:]}{cause}"
    res["secs"] = round(time.time() - t0, 1)
    return i, res


def _short(name, constexprs, signature, options, attrs):
    sig_ptr = {k: v for k, v in signature.items() if str(v).startswith("*")}
    ce = {k: v for k, v in constexprs.items()}
    return name, ce, sig_ptr, options["num_warps"], attrs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="build: K 1,4,8, L - 1 = 15, no-root only at budgets 16/512; topology/accept: max_depth 15")
    ap.add_argument("--jobs", type=int, default=max(1, os.cpu_count() or 1))
    ap.add_argument("--only", choices=("build", "topology", "accept"))
    ap.add_argument("--budgets", help="comma-separated budgets instead of the default list")
    ap.add_argument("--ks", help="comma-separated K values for the build (default 1,4,8,16,64; quick 1,4,8)")
    ap.add_argument("--json", help="write every result here")
    a = ap.parse_args()

    global BUDGETS, BUILD_KS
    if a.budgets:
        BUDGETS = tuple(int(x) for x in a.budgets.split(","))
    if a.ks:
        BUILD_KS = tuple(int(x) for x in a.ks.split(","))
    _patch()
    if a.only in (None, "build"):
        _cases_build(a.quick)
    if a.only in (None, "topology"):
        _cases_topology(a.quick)
    if a.only in (None, "accept"):
        _cases_accept(a.quick)

    backend = make_backend(TARGET)
    index = {}
    for kernel, args, kwargs, case in RECORDED:
        options, signature, constexprs, attrs = _specialise(kernel, args, kwargs, backend)
        opts = options.__dict__
        key = (kernel.__name__, repr(signature), repr(sorted((str(k), repr(v)) for k, v in constexprs.items())),
               repr(sorted((str(k), repr(v)) for k, v in attrs.items())), repr(sorted(opts.items())))
        if key not in index:
            index[key] = len(SPECS)
            SPECS.append([kernel.__name__, kernel, signature, constexprs, attrs, opts, []])
        SPECS[index[key]][6].append(case)
    print(f"{len(RECORDED)} wrapper launches -> {len(SPECS)} distinct specialisations; triton {triton.__version__}, "
          f"{a.jobs} jobs", flush=True)

    results = [None] * len(SPECS)
    ctx = mp.get_context("fork")
    t0 = time.time()
    with cf.ProcessPoolExecutor(max_workers=a.jobs, mp_context=ctx) as ex:
        for i, res in map(lambda f: f.result(), cf.as_completed([ex.submit(_compile_one, i) for i in range(len(SPECS))])):
            results[i] = res
            name, kernel, signature, constexprs, attrs, opts, cases = SPECS[i]
            ce = {kernel.arg_names[k[0]]: v for k, v in constexprs.items()}
            ptrs = {k: v for k, v in signature.items() if str(v).startswith("*")}
            status = "OK " if res["ok"] else "ERR"
            spill = (res["spill_st"] or 0) + (res["spill_ld"] or 0)
            print(f"{status} {name} warps={opts['num_warps']} {ce} regs={res['regs']} spill_st={res['spill_st']} "
                  f"spill_ld={res['spill_ld']} stack={res['stack']} smem={res['shared']} ({res['secs']}s)"
                  f"{'  SPILLS' if spill else ''}", flush=True)
            print(f"    ptrs={ptrs} e.g. {cases[0]} (+{len(cases) - 1} launches)", flush=True)
            if res["error"]:
                print("    " + res["error"].replace("\n", "\n    "), flush=True)
    n_err = sum(not r["ok"] for r in results)
    n_spill = sum(r["ok"] and ((r["spill_st"] or 0) + (r["spill_ld"] or 0)) > 0 for r in results)
    print(f"done in {time.time() - t0:.0f}s: {len(SPECS)} specialisations, {n_err} failed, {n_spill} spill; "
          f"max regs {max((r['regs'] or 0) for r in results)}")
    if a.json:
        rows = []
        for (name, kernel, signature, constexprs, attrs, opts, cases), res in zip(SPECS, results):
            rows.append({
                "kernel": name,
                "num_warps": opts["num_warps"],
                "constexprs": {kernel.arg_names[k[0]]: v for k, v in constexprs.items()},
                "signature": {k: str(v) for k, v in signature.items()},
                "attrs": {str(k): str(v) for k, v in attrs.items()},
                "cases": cases,
                **res,
            })
        with open(a.json, "w") as f:
            json.dump({"triton": triton.__version__, "results": rows}, f, indent=1)
    return 1 if (n_err or n_spill) else 0


if __name__ == "__main__":
    sys.exit(main())
