"""Run a test module's Triton kernels on CPU under the Triton interpreter.

TRITON_INTERPRET only works if set before Triton is first imported, and setting it in the pytest process
would leak into every later test, so a module that tests kernels re-runs itself in a subprocess with it:

    if not torch.cuda.is_available() and not interpreter_active():
        test_rerun_in_interpreter_subprocess = make_rerun_test(__file__, "SGLANG_DDTREE_..._CHILD")
    else:
        ...  # the real tests, run by the child (or natively on CUDA)
"""

import os
import subprocess
import sys

import pytest


def interpreter_active() -> bool:
    """TRITON_INTERPRET is set and took effect (Triton's language functions are the interpreter's)."""
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        return False
    try:
        import triton.language as tl
    except ImportError:
        return False
    return type(tl.sum).__name__ == "InterpretedFunction"


def _have_triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def make_rerun_test(test_file: str, child_env: str):
    """A test that runs ``pytest test_file`` in a child with TRITON_INTERPRET=1 and fails with its output."""

    @pytest.mark.skipif(not _have_triton(), reason="Triton is not installed")
    def test_rerun_in_interpreter_subprocess():
        assert os.environ.get(child_env) != "1", "TRITON_INTERPRET did not take effect in the child"
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, TRITON_INTERPRET="1", **{child_env: "1"})
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", os.path.abspath(test_file)],
            cwd=root, env=env, capture_output=True, text=True, timeout=900,
        )
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]

    return test_rerun_in_interpreter_subprocess


def kernel_test_mode(test_file: str, child_env: str, module_globals: dict):
    """The set-up of a kernel test module that runs natively on CUDA (marked ``gpu``) and on CPU under the
    interpreter in a child process: returns (run_here, cuda, device). When not ``run_here`` it puts the re-run
    test into ``module_globals``; on CUDA it marks the module ``gpu``. Use as

        _RUN_HERE, _CUDA, DEV = kernel_test_mode(__file__, "SGLANG_DDTREE_..._CHILD", globals())
        if _RUN_HERE:
            ...  # the real tests
    """
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not interpreter_active():
        module_globals["test_rerun_in_interpreter_subprocess"] = make_rerun_test(test_file, child_env)
        return False, cuda, None
    if cuda:
        module_globals["pytestmark"] = pytest.mark.gpu
    return True, cuda, "cuda" if cuda else "cpu"
