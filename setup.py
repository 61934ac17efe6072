"""Build steps pyproject.toml cannot state: the optional compiled record encoder.

``changelog/record/_records.c`` encodes the append path's records in one C loop
(docs/performance.md, "The compiled record encoder").  It is optional: without a C
compiler the build goes on without it, and ``changelog.record.batch`` falls back to
aiokafka's builder (then to the pure-Python reference), which write the same bytes.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "changelog.record._records",
            sources=["changelog/record/_records.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra"],
            optional=True,
        )
    ]
)
