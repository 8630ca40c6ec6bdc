"""``python -m sglang_ddtree doctor``: check the environment a DDTREE deployment needs.

One line per check, ``OK`` / ``FAIL`` / ``WARN``, each failure with the fix. The exit code is 0 only
when every required check passes. It runs anywhere, including machines without a GPU (where the GPU
check fails, clearly). Checks: the plugin entry point; SGLang in the supported range; torch and its
CUDA build against what sglang, sgl-kernel and flashinfer expect; the GPU and the attention backends
DDTREE can use on it; every upstream symbol our hooks need; the server's own modules (HTTP server,
engine, scheduler, model runner, the DDTREE worker), imported with everything they import.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import importlib.metadata as metadata
import json
import os
import re
import sys
import warnings
from dataclasses import asdict, dataclass
from typing import List, Optional

from sglang_ddtree.version import SUPPORTED_SGLANG_SPEC, __version__

DESCRIPTION = ("Check the environment a DDTREE deployment needs: one line per check, each failure with its "
               "fix; exit code 0 only when every required check passes.")

# The server's own modules, imported in a fresh interpreter with everything they import: what fails there
# crashes `python -m sglang.launch_server` seconds after launch. launch_server imports the HTTP server
# (which imports the engine and the tokenizer manager); the engine starts the scheduler process (scheduler,
# model runner, and for DDTREE our worker) and the detokenizer process.
SERVER_MODULES = (
    "soundfile",  # needs the libsndfile system library; sglang imports it at start (openai/streaming_asr.py)
    "sglang.srt.entrypoints.http_server",
    "sglang.srt.entrypoints.engine",
    "sglang.srt.managers.tokenizer_manager",
    "sglang.srt.managers.scheduler",
    "sglang.srt.managers.detokenizer_manager",
    "sglang.srt.model_executor.model_runner",
    "sglang_ddtree.worker",
)
# Import names whose pip distribution is named otherwise (the rest install under their import name).
_PIP_NAMES = {"zmq": "pyzmq", "PIL": "pillow", "yaml": "pyyaml", "multipart": "python-multipart",
              "cv2": "opencv-python-headless", "sklearn": "scikit-learn", "google": "protobuf"}
_IMPORT_SCRIPT = r"""
import importlib, json, sys, warnings
warnings.simplefilter("ignore")
results = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
        results.append([name, None, None, None])
    except BaseException as e:  # soundfile raises OSError without libsndfile; fastapi a RuntimeError
        results.append([name, type(e).__name__, str(e).strip(), getattr(e, "name", None)])
print("\n@@doctor@@" + json.dumps(results))
"""

# Compute capability -> (architecture, attention backends DDTREE can verify trees with there).
_GPU_FAMILIES = {
    (9, 0): ("Hopper", "triton, flashinfer, fa3 (tested on the H200; trtllm_mha has no tree mask)"),
    (10, 0): ("Blackwell (datacenter)", "triton, flashinfer (trtllm_mha has no tree mask)"),
    (10, 3): ("Blackwell (datacenter)", "triton, flashinfer (trtllm_mha has no tree mask)"),
    (12, 0): ("Blackwell (workstation/consumer)", "triton, flashinfer (trtllm_mha rejects SM120)"),
}


@dataclass
class Check:
    name: str
    status: str  # "OK", "FAIL" or "WARN"
    detail: str
    fix: str = ""
    required: bool = True


def _dist_version(name: str) -> Optional[str]:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _pinned(dist: str, requirement: str) -> Optional[str]:
    """The exact version ``dist`` pins for ``requirement`` (e.g. sglang pins torch==2.11.0)."""
    try:
        reqs = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return None
    for req in reqs:
        m = re.match(rf"^{re.escape(requirement)}(\[[^\]]*\])?\s*==\s*([^;\s]+)", req, re.I)
        if m and "extra ==" not in req:
            return m.group(2)
    return None


def check_plugin() -> Check:
    eps = [ep for ep in metadata.entry_points(group="sglang.srt.plugins") if ep.value.startswith("sglang_ddtree.")]
    if not eps:
        return Check("plugin entry point", "FAIL", "no 'sglang.srt.plugins' entry point of sglang_ddtree found",
                     "install the wheel (pip install sglang_ddtree-*.whl), not just the source tree on PYTHONPATH")
    return Check("plugin entry point", "OK", f"sglang_ddtree {__version__}: {eps[0].name} = {eps[0].value}")


def check_sglang() -> Check:
    from sglang_ddtree.plugin import installed_sglang_version, sglang_version_supported

    found = installed_sglang_version()
    if found is None:
        return Check("sglang", "FAIL", "not installed", f"pip install 'sglang{SUPPORTED_SGLANG_SPEC}'")
    if not sglang_version_supported(found):
        return Check("sglang", "FAIL", f"{found} is outside the supported range {SUPPORTED_SGLANG_SPEC}",
                     f"pip install 'sglang{SUPPORTED_SGLANG_SPEC}', or an sglang-ddtree release for sglang {found}")
    from sglang_ddtree.compat import adapter
    from sglang_ddtree.version import SUPPORT_MATRIX

    row = SUPPORT_MATRIX.get(found)
    if row is None:  # inside the range but not a release the matrix lists (a .post release, a dev build)
        return Check("sglang", "WARN", f"{found} is inside {SUPPORTED_SGLANG_SPEC} but not in the support matrix "
                     f"({', '.join(SUPPORT_MATRIX)}); adapter {adapter().family}",
                     f"prefer a listed release: pip install 'sglang=={max(SUPPORT_MATRIX, key=_release_key)}'",
                     required=False)
    return Check("sglang", "OK", f"{found} (supported: {SUPPORTED_SGLANG_SPEC}; {row.status}; pins torch "
                 f"{row.torch}, sglang-kernel {row.sglang_kernel}, flashinfer {row.flashinfer}; adapter "
                 f"{adapter().family})")


def _release_key(version: str):
    from packaging.version import Version

    return Version(version)


def check_torch() -> Check:
    try:
        import torch
    except ImportError as e:
        return Check("torch", "FAIL", f"not importable ({e})", "pip install the torch version sglang pins")
    want = _pinned("sglang", "torch")
    cuda = torch.version.cuda
    detail = f"{torch.__version__} (CUDA build: {cuda or 'none, CPU-only'})"
    if want and torch.__version__.split("+")[0] != want:
        return Check("torch", "FAIL", f"{detail}; sglang {_dist_version('sglang')} pins torch=={want}",
                     f"pip install torch=={want} (sgl-kernel is built against it)")
    if cuda is None:
        return Check("torch", "FAIL", detail, "install a CUDA build of torch (e.g. the cu130 wheel)")
    return Check("torch", "OK", detail)


def _linked_cudart_majors(package_dir: str) -> set:
    """CUDA runtime major versions the package's shared objects link (read from their bytes)."""
    majors = set()
    for so in glob.glob(os.path.join(package_dir, "**", "*.so"), recursive=True):
        try:
            with open(so, "rb") as f:
                majors.update(int(m) for m in re.findall(rb"libcudart\.so\.(\d+)", f.read()))
        except OSError:
            continue
    return majors


def check_sgl_kernel() -> Check:
    spec = importlib.util.find_spec("sgl_kernel")
    if spec is None or not spec.submodule_search_locations:
        return Check("sgl-kernel", "FAIL", "not installed", f"pip install 'sglang-kernel=={_pinned('sglang', 'sglang-kernel')}'")
    version = _dist_version("sglang-kernel") or _dist_version("sgl-kernel") or "unknown version"
    majors = _linked_cudart_majors(list(spec.submodule_search_locations)[0])
    try:
        import torch

        torch_major = int(torch.version.cuda.split(".")[0]) if torch.version.cuda else None
    except ImportError:
        torch_major = None
    detail = f"{version}, links CUDA runtime {sorted(majors) or 'unknown'}"
    if torch_major is not None and majors and torch_major not in majors:
        return Check("sgl-kernel", "FAIL", f"{detail} but torch is built for CUDA {torch_major}",
                     "install torch and sglang-kernel built for the same CUDA major (e.g. both cu130)")
    try:
        importlib.import_module("sgl_kernel")
    except Exception as e:  # an ABI mismatch shows up as an undefined symbol or a missing libcudart
        return Check("sgl-kernel", "FAIL", f"{detail}; import failed: {type(e).__name__}: {e}",
                     "reinstall sglang-kernel for your torch/CUDA (a torch ABI or CUDA mismatch is the usual cause)")
    return Check("sgl-kernel", "OK", detail)


def check_flashinfer() -> Check:
    version = _dist_version("flashinfer-python")
    if version is None:
        return Check("flashinfer", "FAIL", "not installed", f"pip install 'flashinfer-python=={_pinned('sglang', 'flashinfer_python')}'")
    detail = f"flashinfer-python {version}"
    try:
        import torch

        torch_cuda = torch.version.cuda
    except ImportError:
        torch_cuda = None
    for extra in ("flashinfer-jit-cache", "flashinfer-cubin"):
        v = _dist_version(extra)
        if v is None:
            continue
        detail += f", {extra} {v}"
        m = re.search(r"\+cu(\d+)", v)
        if m and torch_cuda and not m.group(1).startswith(torch_cuda.split(".")[0]):
            return Check("flashinfer", "FAIL", f"{detail} but torch is built for CUDA {torch_cuda}",
                         f"install {extra} built for CUDA {torch_cuda}")
    return Check("flashinfer", "OK", detail)


def check_gpu() -> Check:
    try:
        import torch
    except ImportError:
        return Check("GPU", "FAIL", "torch is not importable", "install torch first")
    if not torch.cuda.is_available():
        return Check("GPU", "FAIL", "no CUDA GPU visible to torch",
                     "run on a machine with an NVIDIA GPU (Hopper sm_90 or Blackwell sm_100/sm_120), check "
                     "nvidia-smi, the driver and CUDA_VISIBLE_DEVICES")
    cap = torch.cuda.get_device_capability(0)
    name = torch.cuda.get_device_name(0)
    family = _GPU_FAMILIES.get(cap)
    if family is None:
        return Check("GPU", "WARN", f"{name} (sm_{cap[0]}{cap[1]}): not a tested architecture; try --attention-backend triton",
                     required=False)
    detail = f"{name} (sm_{cap[0]}{cap[1]}, {family[0]}); DDTREE target attention backends: {family[1]}"
    if cap == (9, 0):
        from sglang_ddtree.backends import fa3_library_installed

        if not fa3_library_installed():
            detail += "; sgl_kernel's FA3 library (flash_ops) is NOT installed, so fa3 is unavailable here"
        else:
            from sglang_ddtree.worker import fa3_tree

            detail += (f"; fa3 tree verify: {'DDTREE fused tree attention' if fa3_tree.enabled() else 'upstream cascade'}"
                       f" ({fa3_tree.ENV}={'1' if fa3_tree.enabled() else '0'})")
    detail += f"; with no --attention-backend DDTREE uses {_default_backend(cap)}; {_budget_note(cap)}"
    return Check("GPU", "OK", detail + "; " + _hybrid_note() + "; " + _paged_note())


def _budget_note(cap) -> str:
    """The budget DDTREE takes on a dense target when the user gives none (``validation.auto_default_unverified``),
    with that default backend at tp 1 and page size 1."""
    import types

    from sglang_ddtree.config import AUTO, AUTO_DEFAULT_SCOPE, DEFAULT_BUDGET
    from sglang_ddtree.validation import auto_default_unverified

    why = auto_default_unverified(types.SimpleNamespace(
        tp_size=1, page_size=None, attention_backend=_default_backend(cap), prefill_attention_backend=None,
        decode_attention_backend=None))
    if why is None:
        return f"with no --speculative-ddtree-budget a dense target at tp 1 / page 1 gets '{AUTO}' here"
    return (f"with no --speculative-ddtree-budget a dense target gets {DEFAULT_BUDGET} here ('{AUTO}' is the default "
            f"only at {AUTO_DEFAULT_SCOPE}; here {why})")


def _default_backend(cap) -> str:
    """The backend DDTREE picks on this GPU when the user names none (``backends.default_target_backend``)."""
    from sglang_ddtree.backends import default_target_backend, fa3_library_installed
    from sglang_ddtree.worker import fa3_tree

    return default_target_backend(tuple(cap), fa3_installed=fa3_library_installed, fa3_fused=fa3_tree.enabled)[0]


def _hybrid_note() -> str:
    """What hybrid Mamba/GDN serving needs (``hybrid_args``)."""
    from sglang_ddtree import hybrid_args
    from sglang_ddtree.compat import adapter
    from sglang_ddtree.config import AUTO_MAX_BUDGET, HYBRID_DEFAULT_BUDGET

    try:
        beyond = hybrid_args.experimental()
    except ValueError as e:
        return f"hybrid Mamba/GDN targets: {e}"
    family = adapter().family
    if family != hybrid_args.VERIFIED_FAMILY:
        return (f"hybrid Mamba/GDN targets: refused on SGLang {family} (the tree verify's state commit is verified "
                f"against {hybrid_args.VERIFIED_FAMILY} only)")
    where = (f"EXPERIMENTAL beyond --attention-backend {hybrid_args.VERIFIED_ATTENTION_BACKEND} / tp 1 "
             f"({hybrid_args.ENV}=1)" if beyond else
             f"--attention-backend {hybrid_args.VERIFIED_ATTENTION_BACKEND} and tp 1 (GPU-verified; "
             f"{hybrid_args.ENV}=1 to try others)")
    return (f"hybrid Mamba/GDN targets: tree verify on, {where}; --page-size > 1 there with a fixed budget "
            f"(GPU-verified at 16 / 64; with budget auto or beyond triton / tp 1 only with "
            f"SGLANG_DDTREE_EXPERIMENTAL_PAGED=1, not yet verified on a GPU); with the radix cache use "
            f"--mamba-scheduler-strategy extra_buffer (--mamba-track-interval >= budget + 1) or no_buffer with "
            f"--disable-overlap-schedule; default budget {HYBRID_DEFAULT_BUDGET} there; each tree row keeps a conv + "
            f"SSM state (budget + 1 rows per request, "
            f"budget auto: its largest bucket's, {AUTO_MAX_BUDGET + 1} or, where those states would take more than "
            f"{hybrid_args.AUTO_STATE_SHARE:g} of --mem-fraction-static, the largest bucket within it), checked "
            f"against the GPU at start")


def _paged_note() -> str:
    """Where DDTREE takes --page-size > 1 on dense targets (``validation._check_page_size``; hybrid ones:
    ``_hybrid_note``)."""
    from sglang_ddtree.config import DDTreeArgumentError
    from sglang_ddtree.validation import PAGED_ENV, PAGED_VERIFIED_BACKENDS, paged_kv_enabled
    from sglang_ddtree.worker import fa3_tree

    try:
        on = paged_kv_enabled()
        fused = fa3_tree.enabled()
    except DDTreeArgumentError as e:
        return f"--page-size > 1: {e}"
    if on:
        return f"--page-size > 1: allowed, EXPERIMENTAL beyond the verified configurations ({PAGED_ENV}=1)"
    verified = [b for b in PAGED_VERIFIED_BACKENDS if b != "fa3" or fused]
    cascade = "" if fused else " (fa3 runs upstream's cascade here: refused)"
    return (f"--page-size > 1: {' / '.join(verified)} with a fixed budget (GPU-verified){cascade}; elsewhere refused "
            f"({PAGED_ENV}=1 to try it, not yet verified on a GPU)")


def check_upstream_symbols() -> Check:
    from sglang_ddtree.compat import installed_symbols, missing_upstream_symbols, unchecked_upstream_symbols

    missing = missing_upstream_symbols()
    unchecked = unchecked_upstream_symbols()
    checked = len(installed_symbols()) - len(unchecked)  # the installed release's entries
    # Symbols of a package that is absent (sgl_kernel) are left to that package's own check.
    skipped = f"; {len(unchecked)} not checked: {'; '.join(sorted({r for *_, r in unchecked}))}" if unchecked else ""
    if missing:
        lines = "; ".join(f"{path} ({purpose}): {err}" for path, purpose, err in missing)
        return Check("upstream symbols", "FAIL", f"{len(missing)}/{checked} do not resolve: {lines}{skipped}",
                     f"install sglang{SUPPORTED_SGLANG_SPEC} with its dependencies (a missing module above names what "
                     "to install); a symbol that moved in a newer SGLang needs an sglang-ddtree release for it")
    return Check("upstream symbols", "OK", f"all {checked} resolve{skipped}")


def _import_fix(module: str, error: str, message: str, missing: Optional[str]) -> str:
    """What to install for one failed import (the missing module's pip name, or what the error names)."""
    if module == "soundfile" and error == "OSError":
        return "install the libsndfile system library (apt-get install libsndfile1)"
    if missing:
        top = missing.split(".")[0]
        if top == "sglang" or top == "sglang_ddtree":
            return f"reinstall {top}: its module {missing} is missing"
        return f"pip install {_PIP_NAMES.get(top, top)}"
    named = re.search(r"pip install ([\w.\[\]=<>-]+)", message)  # e.g. fastapi: 'pip install python-multipart'
    return f"pip install {named.group(1)}" if named else f"fix the import of {module} ({error})"


def check_runtime_modules(modules=SERVER_MODULES, timeout: float = 600) -> Check:
    """Import the server's own modules (``SERVER_MODULES``) in a fresh interpreter, as the server does."""
    import subprocess

    name = "server runtime modules"
    proc = subprocess.run([sys.executable, "-c", _IMPORT_SCRIPT, *modules], capture_output=True, text=True,
                          timeout=timeout)
    marker = proc.stdout.rfind("@@doctor@@")
    if marker < 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Check(name, "FAIL", f"the import interpreter died (exit code {proc.returncode}): {tail}",
                     "run: python -c 'import sglang.srt.entrypoints.http_server' to see the full error")
    failed = [r for r in json.loads(proc.stdout[marker + len("@@doctor@@"):]) if r[1] is not None]
    if failed:
        fixes = list(dict.fromkeys(_import_fix(*r) for r in failed))  # one fix per missing package, in order
        detail = "; ".join(f"{m}: {err}: {msg.splitlines()[0] if msg else ''}" for m, err, msg, _ in failed)
        return Check(name, "FAIL", f"{len(failed)}/{len(modules)} do not import: {detail}",
                     "; ".join(fixes) + " (then run the doctor again: a module behind it may be missing too)")
    return Check(name, "OK", f"all {len(modules)} import in a fresh interpreter: {', '.join(modules)}")


CHECKS = (check_plugin, check_sglang, check_torch, check_sgl_kernel, check_flashinfer, check_gpu,
          check_upstream_symbols, check_runtime_modules)


def run_checks() -> List[Check]:
    results = []
    for fn in CHECKS:
        try:
            results.append(fn())
        except Exception as e:  # a crashing check is a failed check, never a crashed doctor
            results.append(Check(fn.__name__.replace("check_", ""), "FAIL", f"check crashed: {type(e).__name__}: {e}",
                                 "report this as an sglang-ddtree bug"))
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sglang_ddtree doctor", description=DESCRIPTION)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    with warnings.catch_warnings():  # upstream's import-time warnings are noise here
        warnings.simplefilter("ignore")
        results = run_checks()
    ok = all(r.status != "FAIL" or not r.required for r in results)
    if args.json:
        print(json.dumps({"ok": ok, "checks": [asdict(r) for r in results]}, indent=1))
    else:
        for r in results:
            print(f"[{r.status:>4}] {r.name}: {r.detail}")
            if r.status != "OK" and r.fix:
                print(f"       fix: {r.fix}")
        print("doctor: all required checks passed" if ok else "doctor: some required checks FAILED (see fix lines)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
