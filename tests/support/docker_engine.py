"""A real Docker engine for the tests, and a Triton image built on this machine without any registry.

`DockerDaemon` starts Debian's `dockerd` by hand (no systemd) with its own data-root, exec-root,
pid file and socket under a short temporary folder, and stops it by its pid. `build_triton_image`
lays out a root filesystem from files already here -- the nvidia-pytriton wheel's `tritonserver`
with the libraries it links, the python backend with the stub for this Python, a Python 3.11 with
its standard library and the packages the fixture models import (numpy, onnxruntime), and the
system libraries all of those link (found with `ldd`) -- and imports it as an image
(`tar -c | docker import`), with the paths the NGC image uses (/opt/tritonserver).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

DOCKERD = shutil.which("dockerd") or next(
    (p for p in ("/usr/sbin/dockerd", "/usr/bin/dockerd") if os.access(p, os.X_OK)), None
)
DOCKERD_HOW = "bash scripts/system-deps.sh installs Debian's docker.io package"
IMAGE_REPO = "local/perfkit-triton"
TRITON_HOME = "/opt/tritonserver"
SITE_DIR = "/usr/local/lib/python3.11/dist-packages"  # on Debian's python3.11 sys.path
# What the fixture models import, with the shared libraries their wheels carry beside them.
MODEL_PACKAGES = ("numpy", "numpy.libs", "onnxruntime")
_STDLIB_SKIP = ("test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data")
_LDD_LINE = re.compile(r"^\s*(?:\S+\s+=>\s+)?(/\S+)\s+\(0x[0-9a-f]+\)")


class DockerDaemon:
    """dockerd started by hand under workdir; `stop()` ends it by its pid and removes its folders."""

    def __init__(self, workdir: Path, startup_timeout_s: float = 60.0) -> None:
        assert DOCKERD is not None
        self.workdir = workdir
        self.socket = workdir / "docker.sock"
        self.url = f"unix://{self.socket}"
        self._log = (workdir / "dockerd.log").open("w")
        self.proc = subprocess.Popen(
            [
                DOCKERD,
                f"--data-root={workdir / 'data'}",
                f"--exec-root={workdir / 'exec'}",
                f"--pidfile={workdir / 'dockerd.pid'}",
                f"--host={self.url}",
                # Ports are published on loopback through docker-proxy: no NAT rules on the host.
                "--iptables=false",
                "--ip-masq=false",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C meant for a test's child never reaches the daemon
        )
        self.client = self._connect(startup_timeout_s)

    def _connect(self, timeout_s: float) -> Any:
        import docker
        import docker.errors
        import requests

        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dockerd exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self.socket.exists():
                client = docker.DockerClient(base_url=self.url, timeout=120)
                try:
                    client.ping()
                    return client
                except (docker.errors.DockerException, requests.exceptions.RequestException):
                    client.close()
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"dockerd not answering on {self.socket} after {timeout_s} s:\n{self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the daemon's log."""
        try:
            return "\n".join((self.workdir / "dockerd.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def containers(self) -> list[Any]:
        """Every container the engine has, running or not."""
        return list(self.client.containers.list(all=True))

    def stop(self) -> None:
        """SIGTERM the daemon (it stops its containerd), SIGKILL after 30 s; remove its folders."""
        try:
            self.client.close()
        except Exception:
            pass
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        # overlay mounts are gone once the daemon stopped cleanly; anything left busy is skipped
        subprocess.run(["umount", "-R", "-l", str(self.workdir / "data")], capture_output=True)
        subprocess.run(["umount", "-R", "-l", str(self.workdir / "exec")], capture_output=True)
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_daemon() -> DockerDaemon:
    """A fresh dockerd under a short folder in /tmp (unix socket paths max out at 107 bytes)."""
    return DockerDaemon(Path(tempfile.mkdtemp(prefix="pkd-", dir="/tmp")))


# -- the image ----------------------------------------------------------------------------------
def _site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def _elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _ldd(files: list[Path], env: dict[str, str]) -> set[Path]:
    found: set[Path] = set()
    for i in range(0, len(files), 64):
        out = subprocess.run(["ldd", *map(str, files[i : i + 64])], capture_output=True, text=True, env=env).stdout
        for line in out.splitlines():
            m = _LDD_LINE.match(line)
            if m:
                found.add(Path(m.group(1)))
    return found


def _place(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists() or dest.is_symlink():
        return
    try:
        os.link(src, dest)  # same filesystem: no bytes copied
    except OSError:
        shutil.copy2(src, dest)


def _place_tree(src: Path, dest: Path, skip: Iterable[str] = ()) -> None:
    skipped = set(skip)
    for dirpath, dirnames, filenames in os.walk(src):
        here = Path(dirpath)
        rel = here.relative_to(src)
        if here == src:
            dirnames[:] = [d for d in dirnames if d not in skipped]
        for name in filenames:
            path = here / name
            if path.is_symlink():
                target = dest / rel / name
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.is_symlink():
                    os.symlink(os.readlink(path), target)
            elif path.is_file():
                _place(path, dest / rel / name)


def _inside(path: Path) -> Path:
    """Where a host library goes in the image: merged /usr, so /lib/... lands in /usr/lib/..."""
    resolved = Path(os.path.realpath(path))
    parts = resolved.parts
    if len(parts) > 1 and parts[1] in ("lib", "lib64"):
        resolved = Path("/usr", *parts[1:])
    return resolved.parent / path.name


def layout_rootfs(root: Path) -> None:
    """Fill root with tritonserver, the python backend, Python 3.11 and the model packages.

    Raises FileNotFoundError naming what this machine lacks.
    """
    site = _site_packages()
    wheel = site / "pytriton" / "tritonserver"
    libs = site / "nvidia_pytriton.libs"
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = wheel / "python_backend_stubs" / ver / "triton_python_backend_stub"
    python = Path(f"/usr/bin/python{ver}")
    stdlib = Path(f"/usr/lib/python{ver}")
    for need in (wheel / "bin" / "tritonserver", stub, python, stdlib, Path("/bin/bash")):
        if not need.exists():
            raise FileNotFoundError(f"{need} is missing (nvidia-pytriton and Debian's python{ver} are needed)")
    home = root / TRITON_HOME.lstrip("/")
    _place(wheel / "bin" / "tritonserver", home / "bin" / "tritonserver")
    backend = home / "backends" / "python"
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        _place(wheel / "backends" / "python" / name, backend / name)
    _place(stub, backend / "triton_python_backend_stub")
    _place(python, root / "usr" / "bin" / python.name)
    # the python backend starts each stub through `bash -c "exec triton_python_backend_stub ..."`
    bash = Path(shutil.which("bash") or "/bin/bash")
    _place(Path(os.path.realpath(bash)), root / "usr" / "bin" / "bash")
    os.symlink("bash", root / "usr" / "bin" / "sh")
    os.symlink(python.name, root / "usr" / "bin" / "python3")
    _place_tree(stdlib, root / stdlib.relative_to("/"), skip=_STDLIB_SKIP)
    for name in MODEL_PACKAGES:
        _place_tree(site / name, root / SITE_DIR.lstrip("/") / name)
    for base in ("etc", "tmp", "dev", "proc", "sys", "models", "usr/lib64", "usr/sbin"):
        (root / base).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    for link, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/sbin")):
        os.symlink(target, root / link)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n")
    (root / "etc" / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
    (root / "etc" / "nsswitch.conf").write_text("passwd: files\ngroup: files\nhosts: files dns\n")
    # Every ELF file placed so far, and the libraries they link, transitively (ldd lists the closure).
    elves = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and _elf(p)]
    env = {**os.environ, "LD_LIBRARY_PATH": str(libs)}
    linked = _ldd(elves, env)
    arch_lib = Path(sysconfig.get_config_var("LIBDIR") or "/usr/lib") / (sysconfig.get_config_var("MULTIARCH") or "")
    for name in ("libnss_files.so.2", "libnss_dns.so.2", "libresolv.so.2"):  # loaded by name lookups, not linked
        for base in (Path("/usr/lib/x86_64-linux-gnu"), arch_lib):
            if (base / name).exists():
                linked.add(base / name)
                break
    for lib in sorted(linked):
        if root in lib.parents:
            continue
        if lib.parent == libs or libs in lib.parents:
            _place(Path(os.path.realpath(lib)), home / "lib" / lib.name)
        else:
            _place(Path(os.path.realpath(lib)), root / _inside(lib).relative_to("/"))
    loader = root / "usr" / "lib64" / "ld-linux-x86-64.so.2"
    if not loader.exists():
        target = next((p for p in linked if p.name == "ld-linux-x86-64.so.2"), None)
        if target is not None:
            _place(Path(os.path.realpath(target)), loader)


IMAGE_CHANGES = [
    f"ENV PATH={TRITON_HOME}/bin:/usr/local/bin:/usr/bin:/bin",
    f"ENV LD_LIBRARY_PATH={TRITON_HOME}/lib:/usr/lib/x86_64-linux-gnu",
    f"WORKDIR {TRITON_HOME}",
]


def build_triton_image(client: Any, tag: str, workdir: Path) -> str:
    """Lay out the root filesystem under workdir and import it as IMAGE_REPO:tag; returns the image name."""
    root = workdir / "rootfs"
    root.mkdir(parents=True)
    layout_rootfs(root)
    tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
    assert tar.stdout is not None
    try:
        client.api.import_image(src=tar.stdout, repository=IMAGE_REPO, tag=tag, changes=IMAGE_CHANGES, stream_src=True)
    finally:
        tar.stdout.close()
        tar.wait()
    shutil.rmtree(root, ignore_errors=True)
    if tar.returncode != 0:
        raise RuntimeError(f"tar of {root} exited with {tar.returncode}")
    return f"{IMAGE_REPO}:{tag}"


# -- pytest fixtures (conftest imports them) ----------------------------------------------------
def _fixtures() -> tuple[Any, Any]:
    import pytest

    @pytest.fixture(scope="session")
    def docker_daemon() -> Iterator[DockerDaemon]:
        """A real dockerd for this test session; under CI=true a missing dockerd fails the test."""
        from tests.conftest import require

        require("dockerd", DOCKERD, DOCKERD_HOW)
        daemon = start_daemon()
        try:
            yield daemon
        finally:
            for container in daemon.containers():  # a test that failed half-way; the tests assert none
                container.remove(force=True)
            daemon.stop()

    @pytest.fixture(scope="session")
    def triton_image(docker_daemon: DockerDaemon, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
        """A Triton image imported into docker_daemon from this machine's files; removed at the end."""
        started = time.monotonic()
        name = build_triton_image(docker_daemon.client, f"test-{os.getpid()}", tmp_path_factory.mktemp("image"))
        print(f"\nbuilt {name} in {time.monotonic() - started:.1f} s")
        yield name
        docker_daemon.client.images.remove(name, force=True)

    return docker_daemon, triton_image


docker_daemon, triton_image = _fixtures()
