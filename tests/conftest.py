"""Shared test harness: a real Triton server (bundled tritonserver) over a copy of the fixtures,
plus the helpers every test uses to wait on a running process and to require real components.

The `server` marker is set here, not by hand: a test whose fixtures include `tritonserver` (the
real binary; `triton` and every fixture that starts a server request it) is marked `server`, and
any other test that starts tritonserver, in pytest or in a child process, fails (see
tests/_server_guard). So `pytest -m "not server"` starts no server.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from perfkit.errors import BinaryNotFoundError
from perfkit.server import LocalLaunch, launch_local
from perfkit.server.local import LocalServer, find_tritonserver
from tests.support import leftovers, reruns
from tests.support.docker_engine import docker_daemon, triton_image  # noqa: F401  (fixtures: a real Docker engine)

ROOT = Path(__file__).resolve().parent.parent
FIXTURE_MODELS = ROOT / "fixtures" / "models"
SERVER_GUARD = Path(__file__).resolve().parent / "_server_guard"

# `perfkit tune` in a test whose subject is not confirmation: the pick is still confirmed (the record
# keeps its confirmation, and what is asserted of it), by the fewest and shortest repeats the tuner
# takes (2, each 1 s or its minimum of windows) instead of the default 3 of at least 5 s. Tests of
# confirmation itself (tests/server/tuner/test_tune_open_loop.py) keep their own settings.
CHEAP_CONFIRM = ("--confirm", "2", "--confirm-time", "1s")


def _load_server_guard() -> Any:
    spec = importlib.util.spec_from_file_location("perfkit_tests_server_guard", SERVER_GUARD / "sitecustomize.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # installs the guard in this process; it acts only while its variable is set
    return module


_guard = _load_server_guard()
try:
    REAL_TRITONSERVER: Path | None = find_tritonserver()
except BinaryNotFoundError:
    REAL_TRITONSERVER = None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `server` every test that starts a real server: its fixtures include `tritonserver`."""
    for item in items:
        if "tritonserver" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.server)


# Under pytest-xdist with `--dist loadfile` (scripts/test.sh) every test file runs on one worker, so
# a module-scoped server or tune starts once, as without xdist; and the files that use a harness part
# this machine holds once (the Ray cluster, the Docker engine) all go to one worker, which starts it once.
_SHARED_PARTS = {"ray_cluster": "ray", "docker_daemon": "docker"}
# Files whose assertions are verdicts on measurement noise (a gate on an unchanged model passes): one
# scope, so that two of them never load the machine at the same time.
_NOISE_VERDICT_FILES = ("tests/server/gate/test_gate_server.py", "tests/server/cli/test_defaults.py")

try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest-xdist is a dev dependency; without it the suite runs in one process
    LoadScopeScheduling = None

if LoadScopeScheduling is not None:

    class _FileScheduling(LoadScopeScheduling):  # type: ignore[misc,valid-type]  # xdist ships no types (misc) and the name is None where it is missing (valid-type); this branch runs only when it imported
        """loadfile, except that files using one of _SHARED_PARTS share one scope (one worker), as do
        the _NOISE_VERDICT_FILES."""

        _scopes: dict[str, str] = {}

        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            if file not in self._scopes:
                try:
                    text = (ROOT / file).read_text(encoding="utf-8")
                except OSError:
                    text = ""
                shared = next((g for f, g in _SHARED_PARTS.items() if f in text), file)
                self._scopes[file] = "noise-verdicts" if file in _NOISE_VERDICT_FILES else shared
            return self._scopes[file]

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
        """`--dist loadfile`: by file, the users of a shared harness part together (other modes: xdist's own)."""
        return _FileScheduling(config, log) if config.getvalue("dist") == "loadfile" else None


_GUARD_SAVED: dict[str, str | None] = {}
_GUARD_LOG = Path(tempfile.gettempdir()) / f"perfkit-server-guard-{os.getpid()}.log"


def _guarded(item: pytest.Item) -> bool:
    return REAL_TRITONSERVER is not None and item.get_closest_marker("server") is None


def _file_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)  # before any fixture of the test is set up, module- and session-scoped ones too
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Name the test's file for the servers it starts (tests/support/leftovers.py); outside `server` tests,
    make starting tritonserver (here or in a child Python) fail."""
    os.environ[leftovers.TAG] = _file_of(item)
    if not _guarded(item):
        return
    _GUARD_LOG.write_text("")
    guard = {
        _guard.FORBIDDEN_ENV: str(REAL_TRITONSERVER),
        _guard.LOG_ENV: str(_GUARD_LOG),
        "PYTHONPATH": os.pathsep.join(p for p in (str(SERVER_GUARD), os.environ.get("PYTHONPATH")) if p),
    }
    for name, value in guard.items():
        _GUARD_SAVED[name] = os.environ.get(name)
        os.environ[name] = value


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After a guarded test's teardown: put the environment back, and fail the test if it started
    tritonserver. After a file's last test (its module fixtures torn down): fail it if a server the
    file started is still running (and end that server), as after the last test for the session's."""
    try:
        return (yield)
    finally:
        guarded = bool(_GUARD_SAVED)
        for name, value in _GUARD_SAVED.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _GUARD_SAVED.clear()
        launched = _GUARD_LOG.read_text() if guarded and _GUARD_LOG.is_file() else ""
        problems = []
        if launched:
            problems.append(
                f"{item.nodeid} started tritonserver but is not marked `server`; request the `tritonserver`"
                f" fixture (or one that starts a server):\n{launched}"
            )
        ended = [] if nextitem is not None and _file_of(nextitem) == _file_of(item) else [_file_of(item)]
        for tag in ended + ([leftovers.SESSION] if nextitem is None else []):
            left = leftovers.left_behind(tag) if REAL_TRITONSERVER is not None else []
            if left:
                problems.append(
                    f"tritonserver left running after {tag}'s tests (pids {left}, now killed): stop every server"
                    " a test starts, and every command that started one"
                )
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)


def copy_models(dest: Path, names: list[str] | None = None) -> Path:
    """Copy fixture models (all, or the named ones) into dest/models; returns that folder."""
    repo = dest / "models"
    repo.mkdir(parents=True, exist_ok=True)
    for src in sorted(FIXTURE_MODELS.iterdir()):
        if src.is_dir() and (names is None or src.name in names):
            shutil.copytree(src, repo / src.name, ignore=shutil.ignore_patterns("__pycache__"))
    return repo


def require(component: str, found: object, how: str) -> None:
    """Skip a test whose real component is missing, except under CI=true, where that fails the test.

    A skip in CI would let a suite pass without ever running the check it exists for.
    """
    if found:
        return
    message = f"{component} is not installed ({how})"
    if os.environ.get("CI", "").strip().lower() in ("true", "1"):
        pytest.fail(f"{message}; CI=true requires it", pytrace=False)
    pytest.skip(message)


class Lines:
    """Reads a process's text stream on a thread so a test can wait for a line, not for a time."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._done = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._done = True
            self._cond.notify_all()

    def wait_for(self, pattern: str, timeout_s: float = 120.0) -> re.Match[str]:
        """The first line matching pattern (a regex), once it is written; fails if the stream ends first."""
        rx = re.compile(pattern)

        def found() -> re.Match[str] | None:
            return next((m for m in map(rx.search, self.lines) if m), None)

        with self._cond:
            self._cond.wait_for(lambda: found() is not None or self._done, timeout=timeout_s)
            match = found()
        if match is None:
            pytest.fail(f"no line matching {pattern!r} within {timeout_s} s; got:\n{self.text()}", pytrace=False)
        return match

    def text(self) -> str:
        """Everything read so far (all of it once the stream has ended)."""
        with self._cond:
            return "\n".join(self.lines)

    def join(self, timeout_s: float = 30.0) -> str:
        """Wait for the end of the stream; returns all of it."""
        self._thread.join(timeout_s)
        return self.text()


def wait_until(condition: Callable[[], object], what: str, timeout_s: float = 60.0) -> None:
    """Wait until condition() holds (a state another process changes, e.g. a file written); fails after timeout_s.

    For state that has no stream to wait on; it checks often, and the test asserts on the
    state itself, never on how long it took.
    """
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}", pytrace=False)
        time.sleep(0.05)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(reruns, "perfkit-reruns")  # scripts/test.sh's re-run policy: `quiet` and `flaky`


def pytest_unconfigure(config: pytest.Config) -> None:
    _GUARD_LOG.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def session_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_models(tmp_path_factory.mktemp("repo"))


@pytest.fixture(scope="session")
def tritonserver() -> Path:
    """The real tritonserver binary. A test or fixture that starts a server, by launch_local or by
    running the CLI, requests this fixture: that marks the test `server` and lets it start one."""
    require("tritonserver", REAL_TRITONSERVER, "pip install 'perfkit[server]' (scripts/setup.sh does)")
    assert REAL_TRITONSERVER is not None
    return REAL_TRITONSERVER


class SharedTriton:
    """The one real server with every fixture model that tests only reading from it share, started on
    first use. Should it die (a Triton crash under a test's connection faults), the next test gets a
    new one, with a warning holding the dead server's log, instead of every later test of the worker
    failing on a refused connection."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self.started: list[LocalServer] = []

    def live(self) -> LocalServer:
        if self.started and self.started[-1].alive():
            return self.started[-1]
        if self.started:
            import warnings

            log = self.started[-1].log_tail()
            warnings.warn(f"the shared Triton died; a new one serves the next tests. Its log:\n{log}", stacklevel=2)
        self.started.append(launch_local(LocalLaunch(self.repo, env={leftovers.TAG: leftovers.SESSION})))
        return self.started[-1]

    def stop(self) -> None:
        for server in self.started:
            server.stop()


@pytest.fixture(scope="session")
def shared_triton(tritonserver: Path, session_repo: Path) -> Iterator[SharedTriton]:
    shared = SharedTriton(session_repo)
    try:
        yield shared
    finally:
        shared.stop()


@pytest.fixture
def triton(shared_triton: SharedTriton) -> LocalServer:
    """One real server with every fixture model, shared by the tests that only read from it (a live
    one: see SharedTriton)."""
    return shared_triton.live()


@pytest.fixture
def model_repo(tmp_path: Path) -> Path:
    """A private, writable copy of all fixture models for a test that changes configs."""
    return copy_models(tmp_path)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """A two-node Ray cluster on this machine (one process tree per node), joined by this process.

    Yields the cluster's address. Under CI=true a missing Ray fails the test instead of skipping it.
    """
    import os

    try:
        import ray
        from ray.cluster_utils import Cluster
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail('Ray is not installed: pip install -e ".[dev]" (it brings perfkit[distributed])')
        pytest.skip('Ray is not installed (pip install "perfkit[distributed]")')
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Ray's workers import perfkit: make sure they find this checkout's copy.
    old_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    small = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
    cluster = Cluster(initialize_head=True, head_node_args={**small, "include_dashboard": False})
    try:
        # the second node alone offers a custom resource, as client hosts would be labelled
        cluster.add_node(**small, resources={"perfkit_client": 1})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster.address
    finally:
        ray.shutdown()
        cluster.shutdown()
        if old_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_path


PROMETHEUS = shutil.which("prometheus")
PROMETHEUS_HOW = "bash scripts/system-deps.sh installs Debian's prometheus package"


class PrometheusServer:
    """A real Prometheus on loopback scraping the given targets every second; query() its HTTP API."""

    def __init__(self, workdir: Path, targets: list[str]) -> None:
        from perfkit.server._ports import free_ports

        self.port = free_ports(1)[0]
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
            + "".join(
                f"  - job_name: t{i}\n    static_configs:\n      - targets: ['{t}']\n" for i, t in enumerate(targets)
            )
        )
        self.log = (workdir / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [
                str(PROMETHEUS),
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._ready, "prometheus ready", timeout_s=60)

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"prometheus exited with {self.proc.returncode}", pytrace=False)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """The instant vector of a PromQL query, now or at a Unix time (fails the test when Prometheus rejects it)."""
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", f"{expr}: {body}"
        return list(body["data"]["result"])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[list[str]], PrometheusServer]]:
    """Start a real Prometheus (Debian's package) scraping targets; under CI=true a missing one fails."""
    require("prometheus", PROMETHEUS, PROMETHEUS_HOW)
    started: list[PrometheusServer] = []

    def start(targets: list[str]) -> PrometheusServer:
        server = PrometheusServer(tmp_path / f"prometheus{len(started)}", targets)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
