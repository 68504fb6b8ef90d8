"""The real perf_analyzer, fetched from PyPI's tritonclient 2.41.0 wheel (see README "Benchmarks").

The binary needs libcudart.so.12 and libb64.so.0d, which the nvidia-pytriton wheel ships
under hashed names: they are linked under their plain names into a private folder.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ANCHOR_DIR = Path(__file__).resolve().parent / "_anchor"
WHEEL_MEMBER = "tritonclient-2.41.0.data/data/bin/perf_analyzer"


def perf_analyzer() -> tuple[Path, dict[str, str]]:
    """Path of perf_analyzer and the environment it needs; downloads it once."""
    binary = ANCHOR_DIR / "perf_analyzer"
    libs = ANCHOR_DIR / "libs"
    if not binary.exists():
        ANCHOR_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "tritonclient==2.41.0", "-d", str(ANCHOR_DIR)],
            check=True,
        )
        wheel = next(ANCHOR_DIR.glob("tritonclient-2.41.0-*manylinux*x86_64.whl"))
        with zipfile.ZipFile(wheel) as z, z.open(WHEEL_MEMBER) as src:
            binary.write_bytes(src.read())
        binary.chmod(0o755)
    import pytriton

    pylibs = Path(pytriton.__file__).parent.parent / "nvidia_pytriton.libs"
    libs.mkdir(exist_ok=True)
    for pattern, plain in (("libcudart-*.so.12*", "libcudart.so.12"), ("libb64-*.so.0d", "libb64.so.0d")):
        link = libs / plain
        if not link.exists():
            link.symlink_to(next(pylibs.glob(pattern)))
    return binary, {"LD_LIBRARY_PATH": str(libs)}
