"""Build steps pyproject.toml cannot state: two C extensions of the hot paths.

``changelog/record/_records.c`` encodes the append path's records in one C loop
(docs/performance.md, "The compiled record encoder"); ``statestore/stores/_put.c`` is
the typed store's put and get without a Python frame, the write buffer's forget and
the engine's WriteBatch fill ("The compiled put").

A wheel for distribution is built with both required: ``STATESTORE_REQUIRE_EXTENSIONS=1``
(or ``CIBUILDWHEEL=1``, as cibuildwheel sets it) turns a failed compile into a failed
build, so no wheel ships silently without them (``.ci/wheel-check`` builds one that way,
installs it in a fresh virtualenv and imports both).  A source install (``pip install .``
or ``-e .`` from a checkout) keeps them optional: without a C compiler it goes on without
them, and the code falls back to the Python paths, which do the same
(``STATESTORE_PURE=1`` selects those paths even when the extensions are built; see
``changelog/native.py``).
"""

import os

from setuptools import Extension, setup

REQUIRED = "1" in (
    os.environ.get("STATESTORE_REQUIRE_EXTENSIONS", ""),
    os.environ.get("CIBUILDWHEEL", ""),
)

setup(
    ext_modules=[
        Extension(
            "changelog.record._records",
            sources=["changelog/record/_records.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra"],
            optional=not REQUIRED,
        ),
        Extension(
            "statestore.stores._put",
            sources=["statestore/stores/_put.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra"],
            optional=not REQUIRED,
        ),
    ]
)
