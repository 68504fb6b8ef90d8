"""Local mode: run a tritonserver binary (the nvidia-pytriton wheel's by default).

What the bundled binary needs (see docs/guides/profiling.md, "Getting a server"): a writable backend
directory holding the python backend plus the stub built for the running Python,
the wheel's shared libraries on LD_LIBRARY_PATH, and this interpreter's bin/ first
on PATH so models import the same packages.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perfkit.errors import BinaryNotFoundError, InputError, PortInUseError, ServerStartError
from perfkit.server._client_shm import ALLOW_CLIENT_SHM_FLAG, knows_allow_client_shm
from perfkit.server._ports import check_port_free, free_ports
from perfkit.server.base import Endpoints, Server

# Environment for the models' processes unless the user overrides it: BLAS thread pools in
# every python-backend instance spin and starve a small machine (seen: throughput collapse).
DEFAULT_SERVER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
_PR_SET_PDEATHSIG = 1
_HELP_TIMEOUT_S = 30.0
# tritonserver's words for a port another process holds: its own (server src/http_server.cc
# HTTPServer::Start, src/grpc/grpc_server.cc Server::Start: "Socket 'HOST:PORT' already in use"),
# and the gRPC library's and the OS's
_PORT_TAKEN = re.compile(r"socket '[^']*' already in use|address already in use|failed to bind", re.IGNORECASE)


@dataclass(frozen=True)
class LocalLaunch:
    """What to launch. Ports left as None are chosen free; host is loopback by default."""

    model_repository: Path
    models: tuple[str, ...] | None = None  # None: every model in the repository
    tritonserver: Path | None = None
    backend_directory: Path | None = None
    host: str = "127.0.0.1"
    http_port: int | None = None
    grpc_port: int | None = None
    metrics_port: int | None = None
    startup_timeout_s: float = 120.0
    env: Mapping[str, str] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    log_path: Path | None = None
    log_verbose: int = 0
    # Clients will use shared memory: the server is started with --allow-client-shm=true where it knows the flag
    client_shm: bool = False


def _bundled_root() -> Path | None:
    try:
        import pytriton  # noqa: PLC0415  (optional extra "server")
    except ImportError:
        return None
    root = Path(pytriton.__file__).parent / "tritonserver"
    return root if (root / "bin" / "tritonserver").is_file() else None


def find_tritonserver(explicit: Path | None = None) -> Path:
    """The tritonserver binary: explicit path, the bundled wheel's, or PATH; raises BinaryNotFoundError."""
    if explicit is not None:
        path = Path(explicit)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BinaryNotFoundError(
                f"--tritonserver {path}: no executable file there", hint="give the path of a tritonserver binary"
            )
        return path
    bundled = _bundled_root()
    if bundled is not None:
        return bundled / "bin" / "tritonserver"
    on_path = shutil.which("tritonserver")
    if on_path:
        return Path(on_path)
    raise BinaryNotFoundError(
        "no tritonserver binary found (not bundled, not on PATH)",
        hint="pip install 'perfkit[server]', or pass --tritonserver PATH, or use --launch-mode docker/remote",
    )


def check_stub_numpy(version: str) -> None:
    """The bundled python-backend stub takes numpy from this Python's environment (perfkit puts
    its interpreter first on the server's PATH), and under numpy 2 it answers every request with
    empty output tensors (binary_data_size 0: measured with nvidia-pytriton 0.7.0, numpy 2.4 and
    2.5), which a load generator would count as answers. Raises ServerStartError there."""
    if int(version.split(".", maxsplit=1)[0]) >= 2:
        raise ServerStartError(
            f"the bundled Triton's python backend answers with empty outputs under numpy {version}",
            hint="install numpy<2 in perfkit's environment (pip install 'numpy<2'), "
            "or pass --tritonserver and --backend-directory of a Triton built for numpy 2",
        )


def _bundled_backends(root: Path) -> Path:
    """A writable copy of the wheel's backends with this Python's stub in place (cached)."""
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / ver / "triton_python_backend_stub"
    if not stub.is_file():
        raise BinaryNotFoundError(
            f"the bundled Triton has no python backend stub for Python {ver}",
            hint="use a Python the wheel supports: "
            + ", ".join(sorted(p.name for p in (root / "python_backend_stubs").iterdir())),
        )
    lib = root / "backends" / "python" / "libtriton_python.so"
    key = hashlib.sha256(f"{lib.resolve()}:{lib.stat().st_mtime_ns}:{ver}".encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "perfkit" / f"backends-{key}"
    if (cache / "python" / "triton_python_backend_stub").is_file():
        return cache
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache.parent, prefix=".backends-"))
    shutil.copytree(root / "backends", tmp / "b", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(stub, tmp / "b" / "python" / "triton_python_backend_stub")
    try:
        os.rename(tmp / "b", cache)
    except OSError:
        pass  # another launcher won the race; its copy is identical
    shutil.rmtree(tmp, ignore_errors=True)
    return cache


def _set_parent_death_signal() -> None:
    # Runs in the child between fork and exec: if perfkit dies (even SIGKILL), the kernel
    # sends SIGTERM to tritonserver, which then stops its python stubs itself.
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


_LIVE: weakref.WeakSet[LocalServer] = weakref.WeakSet()


def _stop_all_live() -> None:
    for server in list(_LIVE):
        server.stop()


atexit.register(_stop_all_live)


class LocalServer(Server):
    """A tritonserver child process in its own process group."""

    mode = "local"

    def __init__(self, endpoints: Endpoints, proc: subprocess.Popen[bytes], log_path: Path, owns_log_dir: Path | None):
        super().__init__(endpoints)
        self._proc = proc
        self._log_path = log_path
        self._owns_log_dir = owns_log_dir
        self._lock = threading.Lock()
        _LIVE.add(self)

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def log_path(self) -> Path:
        return self._log_path

    def alive(self) -> bool:
        return self._proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self._log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM, wait grace_s, then SIGKILL the whole process group. Idempotent."""
        with self._lock:
            proc = self._proc
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    pass
            # Whatever is left in the group (python stubs, a hung server) is killed outright.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            _LIVE.discard(self)


def _build_env(spec: LocalLaunch, binary: Path, bundled: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in DEFAULT_SERVER_ENV.items():
        env.setdefault(key, value)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if bundled is not None:
        libs = bundled.parent.parent / "nvidia_pytriton.libs"
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in [str(libs), env.get("LD_LIBRARY_PATH", "")] if p)
    env.update(spec.env)
    return env


def _help_text(binary: Path, env: Mapping[str, str]) -> str | None:
    """`tritonserver --help` (what options this binary takes); None where it cannot be run."""
    try:
        done = subprocess.run(
            [str(binary), "--help"], env=dict(env), capture_output=True, timeout=_HELP_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout + done.stderr).decode(errors="replace")


def allow_client_shm_args(spec: LocalLaunch, binary: Path, env: Mapping[str, str]) -> list[str]:
    """`--allow-client-shm=true` where clients will use shared memory and the binary knows the flag
    (its --help lists it); nothing otherwise, as a server that does not know a flag refuses to start."""
    if not spec.client_shm or any(a.startswith("--allow-client-shm") for a in spec.extra_args):
        return []
    return [ALLOW_CLIENT_SHM_FLAG] if knows_allow_client_shm(help_text=_help_text(binary, env)) else []


def _command(
    binary: Path,
    spec: LocalLaunch,
    backend_dir: Path | None,
    ports: Sequence[int],
    repo: Path,
    consent: Sequence[str] = (),
    cache_dir: Path | None = None,
) -> list[str]:
    http_port, grpc_port, metrics_port = ports
    cmd = [
        str(binary),
        f"--model-repository={repo}",
        "--model-control-mode=explicit",
        f"--http-address={spec.host}",
        f"--http-port={http_port}",
        f"--grpc-address={spec.host}",
        f"--grpc-port={grpc_port}",
        f"--metrics-address={spec.host}",
        f"--metrics-port={metrics_port}",
        "--allow-metrics=true",
        f"--log-verbose={spec.log_verbose}",
        "--strict-readiness=true",
        "--exit-on-error=true",
    ]
    if backend_dir is not None:
        cmd.append(f"--backend-directory={backend_dir}")
    if cache_dir is not None and any(a.startswith("--cache-config") for a in spec.extra_args):
        # the wheel's response-cache implementations (Triton looks in /opt/tritonserver/caches by default)
        cmd.append(f"--cache-directory={cache_dir}")
    models = spec.models if spec.models is not None else ("*",)
    cmd += [f"--load-model={m}" for m in models]
    cmd += list(consent)
    cmd += list(spec.extra_args)
    return cmd


def _check_repository(spec: LocalLaunch) -> Path:
    repo = Path(spec.model_repository).resolve()
    if not repo.is_dir():
        raise InputError(
            f"model repository {spec.model_repository} does not exist or is not a directory",
            hint="pass --model-repository DIR",
        )
    for name in spec.models or ():
        if not (repo / name).is_dir():
            raise InputError(f"model {name!r} is not in the model repository {repo}", hint="check the model name")
    return repo


def launch_local(spec: LocalLaunch) -> LocalServer:
    """Start tritonserver and wait until it is ready; raises a ServerError or InputError."""
    repo = _check_repository(spec)
    binary = find_tritonserver(spec.tritonserver)
    bundled = _bundled_root() if spec.tritonserver is None and binary.parent.parent == _bundled_root() else None
    if bundled is not None:
        check_stub_numpy(np.__version__)
    backend_dir = spec.backend_directory or (_bundled_backends(bundled) if bundled is not None else None)
    cache_dir = bundled / "caches" if bundled is not None and (bundled / "caches").is_dir() else None
    env = _build_env(spec, binary, bundled)
    consent = allow_client_shm_args(spec, binary, env)
    chosen = (spec.http_port, spec.grpc_port, spec.metrics_port)
    for port, what in zip(chosen, ("HTTP", "gRPC", "metrics")):
        if port is not None:
            check_port_free(spec.host, port, what)
    attempts = 1 if all(p is not None for p in chosen) else 3
    last_error: PortInUseError | None = None
    for _ in range(attempts):
        auto = iter(free_ports(3, spec.host))
        ports = [p if p is not None else next(auto) for p in chosen]
        owns_dir = None
        if spec.log_path is None:
            owns_dir = Path(tempfile.mkdtemp(prefix="perfkit-server-"))
            log_path = owns_dir / "tritonserver.log"
        else:
            log_path = Path(spec.log_path)
            log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                _command(binary, spec, backend_dir, ports, repo, consent, cache_dir),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_set_parent_death_signal,  # noqa: PLW1509  (no threads run in the child)
            )
        server = LocalServer(Endpoints(spec.host, *ports), proc, log_path, owns_dir)
        try:
            server.wait_ready(spec.startup_timeout_s)
            return server
        except ServerStartError as err:
            server.stop()
            tail = server.log_tail(40)
            if _PORT_TAKEN.search(tail):
                last_error = PortInUseError(
                    "tritonserver could not bind its ports", log_tail=tail, hint="ports raced with another process"
                )
                if attempts > 1:
                    continue
                raise last_error from err
            err.log_tail = tail
            raise
        except BaseException:
            server.stop()
            raise
    assert last_error is not None
    raise last_error
