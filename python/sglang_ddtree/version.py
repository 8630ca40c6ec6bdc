"""Package version and THE one place that states which upstream SGLang releases are supported.

``setup.py`` reads this file (without importing the package) to declare the dependency, the plugin
checks the installed SGLang against it at load time, and ``python -m sglang_ddtree doctor`` reports it.
Tracking a new upstream release means changing these lines and passing the test suites.
"""

__version__ = "0.1.0"

# Supported upstream SGLang: >= MIN and < MAX_EXCLUSIVE (see ../shared/DESIGN.md, "The pinned upstream").
SUPPORTED_SGLANG_MIN = "0.5.16"
SUPPORTED_SGLANG_MAX_EXCLUSIVE = "0.5.17"
SUPPORTED_SGLANG_SPEC = f">={SUPPORTED_SGLANG_MIN},<{SUPPORTED_SGLANG_MAX_EXCLUSIVE}"
