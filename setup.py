"""Builds the optional native module `uniradix._native` (pyproject.toml holds the metadata).

`optional=True`: where no C compiler is found the build is skipped with a warning and the
package installs without it; `uniradix.native` then runs the pure-Python paths.
"""

import sys

from setuptools import Extension, setup

CSRC = "uniradix/csrc"
NAMES = (
    "native_module",
    "cluster_slots",
    "msgpack_ints",
    "page_digests",
    "page_free",
    "row_copy",
    "sha256",
    "slot_checks",
    "tree_walk",
)
SOURCES = [f"{CSRC}/{name}.c" for name in NAMES]
COMPILE_ARGS = [] if sys.platform == "win32" else ["-O3", "-std=c11"]

setup(
    ext_modules=[
        Extension(
            "uniradix._native",
            sources=SOURCES,
            depends=[f"{CSRC}/native.h", f"{CSRC}/sha256.h"],
            extra_compile_args=COMPILE_ARGS,
            optional=True,
        )
    ]
)
