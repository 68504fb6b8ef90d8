"""The compiled part of perfkit: the HTTP/1.1 and gRPC sender (perfkit/loadgen/_native*.c).

Everything else is declared in pyproject.toml. The extension is optional: where it cannot be
built (no C compiler, not Linux) perfkit installs without it and sends from Python
(`perfkit.loadgen.native_available()` says which).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "perfkit.loadgen._native",
            ["perfkit/loadgen/_native.c", "perfkit/loadgen/_native_h2.c", "perfkit/loadgen/_native_hpack.c"],
            depends=["perfkit/loadgen/_native.h", "perfkit/loadgen/_native_hpack.h", "perfkit/loadgen/_native_hpack_tables.h"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-fvisibility=hidden"],
            optional=True,
        )
    ]
)
