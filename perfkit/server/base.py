"""A running Triton server, whoever launched it, and its HTTP admin API."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit.errors import ModelLoadError, ModelNotFoundError, ServerError, ServerStartError
from perfkit.records import TlsSpec
from perfkit.server._client_shm import consent_refusal
from perfkit.server._load_request import load_request_body

# Triton's answer to a load/unload request when it runs without explicit model control.
_MODEL_CONTROL_REFUSED = "explicit model load / unload is not allowed"


@dataclass(frozen=True)
class Endpoints:
    """Where a server listens. URLs are in tritonclient's form (host:port, no scheme)."""

    host: str
    http_port: int
    grpc_port: int | None
    metrics_port: int | None

    @property
    def http_url(self) -> str:
        return f"{_bracket(self.host)}:{self.http_port}"

    @property
    def grpc_url(self) -> str | None:
        return None if self.grpc_port is None else f"{_bracket(self.host)}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str | None:
        if self.metrics_port is None:
            return None
        return f"http://{_bracket(self.host)}:{self.metrics_port}/metrics"


def _refuse_without_consent(payload: dict[str, Any], region: str) -> None:
    refusal = consent_refusal(payload.get("error", ""), region=region)
    if refusal is not None:
        raise refusal


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class Server:
    """A Triton server reachable over HTTP; subclasses add launching and teardown.

    Usable as a context manager: leaving the block stops what was launched.
    """

    mode = "remote"

    def __init__(self, endpoints: Endpoints, *, timeout_s: float = 30.0, tls: TlsSpec | None = None) -> None:
        self.endpoints = endpoints
        self.timeout_s = timeout_s
        self.tls = tls  # the admin API over HTTPS (an https:// URL); None: plain HTTP
        self._ssl_context: ssl.SSLContext | None = None

    # -- lifecycle -------------------------------------------------------------------
    def stop(self) -> None:
        """Stop what this object launched (nothing for a remote server)."""

    def alive(self) -> bool:
        """Whether the server process (if we own one) still runs."""
        return True

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's log, where perfkit has it."""
        return ""

    @property
    def log_path(self) -> Path | None:
        return None

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- admin API -------------------------------------------------------------------
    def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout_s: float | None = None
    ) -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode()
        if self.tls is not None and self._ssl_context is None:
            from perfkit.server.tls import client_context  # noqa: PLC0415  (ssl only for https)

            self._ssl_context = client_context(self.tls)
        req = urllib.request.Request(
            f"{'https' if self.tls else 'http'}://{self.endpoints.http_url}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"} if data is not None else {},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s, context=self._ssl_context) as resp:
                raw = resp.read()
                return resp.status, (json.loads(raw) if raw else {})
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                payload = json.loads(raw) if raw else {}
            except ValueError:
                payload = {"error": raw.decode(errors="replace")}
            return err.code, payload
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise ServerError(
                    f"TLS to {self.endpoints.http_url}: the server's certificate failed verification"
                    f" ({reason.verify_message})",
                    hint="give the CA that signed it with --ssl-https-ca-certificates-file",
                ) from err
            raise ServerError(
                f"Triton server at {self.endpoints.http_url} is unreachable: {reason}",
                hint="check the URL and that the server runs",
            ) from err

    def is_ready(self) -> bool:
        """True when /v2/health/ready answers 200; False on any error."""
        try:
            status, _ = self._request("GET", "/v2/health/ready", timeout_s=2.0)
        except ServerError:
            return False
        return status == 200

    def wait_ready(self, timeout_s: float) -> None:
        """Poll readiness until timeout_s; raises ServerStartError with the log tail."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise ServerStartError(
                    f"{self.mode} Triton server exited during start-up",
                    hint=f"log: {self.log_path}" if self.log_path else None,
                    log_tail=self.log_tail(),
                )
            if self.is_ready():
                return
            time.sleep(0.1)
        raise ServerStartError(
            f"{self.mode} Triton server at {self.endpoints.http_url} not ready after {timeout_s:.0f} s",
            hint="raise --startup-timeout or read the server log",
            log_tail=self.log_tail(),
        )

    def metadata(self) -> dict[str, Any]:
        """Server metadata (name, version, extensions)."""
        status, payload = self._request("GET", "/v2")
        if status != 200:
            raise ServerError(f"GET /v2 failed with HTTP {status}: {payload.get('error', payload)}")
        return payload

    def version(self) -> str:
        """Triton server version string, e.g. '2.51.0'."""
        return str(self.metadata().get("version", "unknown"))

    def load_model(
        self, name: str, *, config: dict[str, Any] | None = None, files: Mapping[str, bytes] | None = None
    ) -> None:
        """Load or reload a model (with a config override and, with it, override files: {"file:1/NAME":
        content}, see _load_request); raises ModelLoadError, ServerError without explicit model control."""
        body = load_request_body(config, files)
        status, payload = self._request("POST", f"/v2/repository/models/{name}/load", body, timeout_s=300)
        if status != 200:
            self._refuse_without_model_control(payload)
            raise ModelLoadError(
                f"model {name!r} failed to load: {payload.get('error', payload)}",
                hint="check the model's config.pbtxt and the server log",
            )

    def unload_model(self, name: str) -> None:
        """Unload a model; raises ModelLoadError, ServerError without explicit model control."""
        status, payload = self._request("POST", f"/v2/repository/models/{name}/unload", {})
        if status != 200:
            self._refuse_without_model_control(payload)
            raise ModelLoadError(f"model {name!r} failed to unload: {payload.get('error', payload)}")

    def _refuse_without_model_control(self, payload: dict[str, Any]) -> None:
        # Triton answers every load/unload this way when it runs without explicit model control:
        # the server's mode is the problem, not the model.
        if _MODEL_CONTROL_REFUSED in str(payload.get("error", "")):
            raise ServerError(
                f"the server at {self.endpoints.http_url} does not let clients load models",
                hint="start it with --model-control-mode=explicit (perfkit's own servers always are)",
            )

    def repository_index(self) -> list[dict[str, Any]]:
        """Models the server's repository holds, with their state."""
        status, payload = self._request("POST", "/v2/repository/index", {})
        if status != 200:
            raise ServerError(f"repository index failed with HTTP {status}: {payload}")
        return payload if isinstance(payload, list) else []

    def model_config(self, name: str) -> dict[str, Any]:
        """The config the server actually applied to a model; raises ModelNotFoundError."""
        status, payload = self._request("GET", f"/v2/models/{name}/config")
        if status != 200:
            raise ModelNotFoundError(
                f"model {name!r} is not available on {self.endpoints.http_url}: {payload.get('error', payload)}",
                hint="check -m and that the model is loaded",
            )
        return payload

    def model_stats(self, name: str = "") -> dict[str, Any]:
        """Cumulative inference statistics (all models when name is empty)."""
        path = f"/v2/models/{name}/stats" if name else "/v2/models/stats"
        status, payload = self._request("GET", path)
        if status != 200:
            raise ServerError(f"statistics for {name or 'all models'!r} failed: {payload.get('error', payload)}")
        return payload

    # -- shared memory -----------------------------------------------------------------------------
    def register_system_shared_memory(self, name: str, key: str, byte_size: int, offset: int = 0) -> None:
        """Register a POSIX shared-memory region with the server; raises ServerError (ServerRefusedError
        when the server was not started to allow client shared memory)."""
        body = {"key": key, "offset": offset, "byte_size": byte_size}
        status, payload = self._request("POST", f"/v2/systemsharedmemory/region/{name}/register", body)
        if status != 200:
            _refuse_without_consent(payload, name)
            raise ServerError(f"registering shared memory {name!r} failed: {payload.get('error', payload)}")

    def unregister_system_shared_memory(self, name: str) -> None:
        """Unregister a system shared-memory region (no error if unknown); raises ServerError when the
        server refuses (e.g. the region is still in use by requests it is executing)."""
        status, payload = self._request("POST", f"/v2/systemsharedmemory/region/{name}/unregister", {})
        if status != 200:
            _refuse_without_consent(payload, name)
            raise ServerError(f"unregistering shared memory {name!r} failed: {payload.get('error', payload)}")

    def register_cuda_shared_memory(self, name: str, raw_handle_b64: str, device_id: int, byte_size: int) -> None:
        """Register a CUDA IPC region with the server; raises ServerError (ServerRefusedError when the
        server was not started to allow client shared memory)."""
        body = {"raw_handle": {"b64": raw_handle_b64}, "device_id": device_id, "byte_size": byte_size}
        status, payload = self._request("POST", f"/v2/cudasharedmemory/region/{name}/register", body)
        if status != 200:
            _refuse_without_consent(payload, name)
            raise ServerError(f"registering CUDA shared memory {name!r} failed: {payload.get('error', payload)}")

    def unregister_cuda_shared_memory(self, name: str) -> None:
        """Unregister a CUDA shared-memory region (no error if unknown); raises ServerError when the
        server refuses (e.g. the region is still in use by requests it is executing)."""
        status, payload = self._request("POST", f"/v2/cudasharedmemory/region/{name}/unregister", {})
        if status != 200:
            _refuse_without_consent(payload, name)
            raise ServerError(f"unregistering CUDA shared memory {name!r} failed: {payload.get('error', payload)}")

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        """Inputs/outputs of a model; raises ModelNotFoundError."""
        path = f"/v2/models/{name}" + (f"/versions/{version}" if version else "")
        status, payload = self._request("GET", path)
        if status != 200:
            raise ModelNotFoundError(
                f"model {name!r}{' version ' + version if version else ''} is not available on "
                f"{self.endpoints.http_url}: {payload.get('error', payload)}",
                hint="check -m/-x and that the model is loaded",
            )
        return payload
