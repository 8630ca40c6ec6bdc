"""Package version and THE one place that states which upstream SGLang releases are supported.

``setup.py`` reads this file (without importing the package) to declare the dependency, the plugin
checks the installed SGLang against it at load time, and ``python -m sglang_ddtree doctor`` reports the
installed release's row of ``SUPPORT_MATRIX``. Tracking a new upstream release means adding its adapter
(``sglang_ddtree.compat``), its row here, raising the range, and passing the test suites
(``scripts/check_upstream.py VERSION --run-suite``).
"""

from typing import NamedTuple

__version__ = "0.1.0"

# Supported upstream SGLang: >= MIN and < MAX_EXCLUSIVE (see ../shared/DESIGN.md, "Upstream releases").
SUPPORTED_SGLANG_MIN = "0.5.16"
SUPPORTED_SGLANG_MAX_EXCLUSIVE = "0.5.24"
SUPPORTED_SGLANG_SPEC = f">={SUPPORTED_SGLANG_MIN},<{SUPPORTED_SGLANG_MAX_EXCLUSIVE}"


class Release(NamedTuple):
    torch: str  # the release's pins (its wheel's Requires-Dist)
    sglang_kernel: str
    flashinfer: str
    status: str  # what has been verified on it (README's support matrix says with which runs)


GPU_VERIFIED = "GPU-verified (H200)"
CPU_VERIFIED = "CPU-verified, not yet run on a GPU"

# Every supported release (README "Support matrix" has the suite results behind each status).
SUPPORT_MATRIX = {
    "0.5.16": Release("2.11.0", "0.4.5", "0.6.14", GPU_VERIFIED),
    "0.5.17": Release("2.11.0", "0.4.5", "0.6.15.post1", GPU_VERIFIED),
    "0.5.18": Release("2.13.0", "0.4.6.post1", "0.6.17", CPU_VERIFIED),
    "0.5.19": Release("2.13.0", "0.4.6.post1", "0.6.18", CPU_VERIFIED),
    "0.5.20": Release("2.13.0", "0.4.7", "0.6.18", CPU_VERIFIED),
    "0.5.21": Release("2.13.0", "0.4.7", "0.6.18", CPU_VERIFIED),
    "0.5.22": Release("2.14.1", "0.4.9", "0.7.1", CPU_VERIFIED),
    "0.5.23": Release("2.14.1", "0.4.10", "0.7.2", CPU_VERIFIED),
}
