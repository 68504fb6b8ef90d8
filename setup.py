"""The compiled part of perfkit: the HTTP/1.1 and gRPC sender (perfkit/loadgen/_native*.c).

Everything else is declared in pyproject.toml. The extension is optional: where it cannot be
built (no C compiler, not Linux) perfkit installs without it and sends from Python
(`perfkit.loadgen.native_available()` says which).
"""

import os

from setuptools import Extension, setup

# PERFKIT_HPACK=nghttp2: the prototype that decodes header blocks with libnghttp2's HPACK inflater
# (Debian's libnghttp2-dev) in place of _native_hpack.c's own, measured in CONTRIBUTING
# ("HTTP/2 and HPACK: hand-written or library"); not the default.
NGHTTP2 = os.environ.get("PERFKIT_HPACK") == "nghttp2"

setup(
    ext_modules=[
        Extension(
            "perfkit.loadgen._native",
            [
                "perfkit/loadgen/_native.c",  # the CPython type: picks the protocol, drives the core
                "perfkit/loadgen/_native_core.c",  # the loop, connections, ledger, loop modes
                "perfkit/loadgen/_native_control.c",  # the core's commands, as the Python type gives them
                "perfkit/loadgen/_native_http1.c",  # protocol: HTTP/1.1
                "perfkit/loadgen/_native_h2.c",  # HTTP/2 connections and frames in, for the two below
                "perfkit/loadgen/_native_h2_write.c",  # HTTP/2 frames out
                "perfkit/loadgen/_native_h2_unary.c",  # protocol: unary gRPC
                "perfkit/loadgen/_native_h2_stream.c",  # protocol: streamed gRPC requests (ModelStreamInfer)
                "perfkit/loadgen/_native_pb.c",  # the fields of a ModelStreamInferResponse it reads
                "perfkit/loadgen/_native_hpack.c",  # HPACK decoding of the server's header blocks
            ],
            depends=[
                "perfkit/loadgen/_native_core.h",
                "perfkit/loadgen/_native_protocols.h",
                "perfkit/loadgen/_native_h2.h",
                "perfkit/loadgen/_native_hpack.h",
                "perfkit/loadgen/_native_pb.h",
                "perfkit/loadgen/_native_hpack_tables.h",
            ],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-fvisibility=hidden"],
            define_macros=[("PERFKIT_HPACK_NGHTTP2", "1")] if NGHTTP2 else [],
            libraries=["nghttp2"] if NGHTTP2 else [],
            optional=True,
        )
    ]
)
