"""Tree-op tests: on a machine without CUDA, run Triton kernels in the interpreter.

``TRITON_INTERPRET`` only takes effect if set before Triton is first imported, so it is set here, when
pytest first enters ``test/tree``. If Triton was already imported (another test directory imported
it), ``test_triton_interp.py`` re-runs itself in a subprocess instead.
"""

import os
import sys

import torch

if not torch.cuda.is_available() and "triton" not in sys.modules:
    os.environ.setdefault("TRITON_INTERPRET", "1")
