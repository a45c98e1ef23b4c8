"""Builds the optional native module `uniradix._native` (pyproject.toml holds the metadata).

`optional=True`: where no C compiler is found the build is skipped with a warning and the
package installs without it; `uniradix.native` then runs the pure-Python paths.
"""

import sys

from setuptools import Extension, setup

SOURCES = ["uniradix/csrc/native_module.c", "uniradix/csrc/sha256.c"]
COMPILE_ARGS = [] if sys.platform == "win32" else ["-O3", "-std=c11"]

setup(
    ext_modules=[
        Extension(
            "uniradix._native",
            sources=SOURCES,
            depends=["uniradix/csrc/sha256.h"],
            extra_compile_args=COMPILE_ARGS,
            optional=True,
        )
    ]
)
