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
            [
                "perfkit/loadgen/_native.c",  # the loop, the Python type, HTTP/1.1
                "perfkit/loadgen/_native_h2.c",  # unary gRPC over HTTP/2: connections, streams, frames in
                "perfkit/loadgen/_native_h2_write.c",  # its frames out
                "perfkit/loadgen/_native_h2_stream.c",  # streamed gRPC requests (ModelStreamInfer)
                "perfkit/loadgen/_native_hpack.c",  # HPACK decoding of the server's header blocks
            ],
            depends=[
                "perfkit/loadgen/_native.h",
                "perfkit/loadgen/_native_h2.h",
                "perfkit/loadgen/_native_hpack.h",
                "perfkit/loadgen/_native_hpack_tables.h",
            ],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-fvisibility=hidden"],
            optional=True,
        )
    ]
)
