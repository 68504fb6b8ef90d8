"""The compiled part of perfkit: the HTTP/1.1 sender (perfkit/loadgen/_native.c).

Everything else is declared in pyproject.toml. The extension is optional: where it cannot be
built (no C compiler, not Linux) perfkit installs without it and sends from Python
(`perfkit.loadgen.native_available()` says which).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "perfkit.loadgen._native",
            ["perfkit/loadgen/_native.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
            optional=True,
        )
    ]
)
