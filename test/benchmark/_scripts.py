"""The benchmark scripts under test: each loaded as a module from ``benchmark/`` (they are scripts, not a
package) and run as a command line, the way users run them."""

import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def path(name: str) -> str:
    """``benchmark/<name>.py``."""
    return os.path.join(ROOT, "benchmark", name + ".py")


def load(name: str):
    """``benchmark/<name>.py`` imported as a module named ``name``."""
    spec = importlib.util.spec_from_file_location(name, path(name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cli(name: str, *args, timeout: float = 300, env=None) -> subprocess.CompletedProcess:
    """``python benchmark/<name>.py ARGS`` (stdout and stderr captured, as text)."""
    return subprocess.run([sys.executable, path(name), *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def no_gpu_here() -> bool:
    """Whether this machine has no CUDA GPU (the scripts' one-error-line path is testable only there)."""
    try:
        import torch
    except ImportError:
        return True
    return not torch.cuda.is_available()
