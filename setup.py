"""Build steps pyproject.toml cannot state: two optional C extensions of the hot paths.

``changelog/record/_records.c`` encodes the append path's records in one C loop
(docs/performance.md, "The compiled record encoder"); ``statestore/stores/_put.c`` is
the typed store's put without a Python frame ("The compiled put").  Both are
optional: without a C compiler the build goes on without them, and the code falls
back to aiokafka's builder (then the pure-Python reference) and to the Python put,
which do the same.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "changelog.record._records",
            sources=["changelog/record/_records.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra"],
            optional=True,
        ),
        Extension(
            "statestore.stores._put",
            sources=["statestore/stores/_put.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra"],
            optional=True,
        ),
    ]
)
