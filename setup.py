"""Build the ``sglang_ddtree`` wheel from ``python/sglang_ddtree``.

The supported SGLang range lives in ONE place, ``python/sglang_ddtree/version.py``; this file reads it
(without importing the package) to declare the dependency.
"""

import os
import re

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _read_version_constants():
    with open(os.path.join(HERE, "python", "sglang_ddtree", "version.py")) as f:
        text = f.read()
    values = dict(re.findall(r'^(__version__|SUPPORTED_SGLANG_MIN|SUPPORTED_SGLANG_MAX_EXCLUSIVE) = "([^"]+)"', text, re.M))
    return values["__version__"], f">={values['SUPPORTED_SGLANG_MIN']},<{values['SUPPORTED_SGLANG_MAX_EXCLUSIVE']}"


VERSION, SGLANG_SPEC = _read_version_constants()

setup(
    name="sglang_ddtree",
    version=VERSION,
    description="DDTree speculative decoding (block-diffusion draft trees) for SGLang, as a plugin",
    long_description=open(os.path.join(HERE, "README.md")).read() if os.path.exists(os.path.join(HERE, "README.md")) else "",
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    package_dir={"": "python"},
    packages=find_packages("python"),
    include_package_data=False,
    package_data={"sglang_ddtree": ["fixtures/**/*"]},
    install_requires=[f"sglang{SGLANG_SPEC}", "packaging"],
    extras_require={"test": ["pytest", "hypothesis"]},
    entry_points={
        "sglang.srt.plugins": ["ddtree = sglang_ddtree.plugin:register"],
        "console_scripts": ["sglang-ddtree = sglang_ddtree.__main__:main"],
    },
)
