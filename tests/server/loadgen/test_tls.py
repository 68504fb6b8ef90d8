"""TLS to the server with perf_analyzer's --ssl-* flags: HTTPS and gRPC over TLS, end to end.

A TLS-terminating proxy (tests/support/tlsproxy.py, a certificate from a test CA made with the openssl
CLI) sits in front of the real Triton's HTTP and gRPC ports; `perfkit profile` measures through it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from perfkit.cli import main
from perfkit.errors import ExitCode
from perfkit.records import RunRecord
from tests.conftest import require
from tests.support.tlsproxy import TlsProxy

FAST = ["-m", "identity", "--concurrency-range", "2", "-p", "300", "-r", "3"]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, a server certificate it signed (for 127.0.0.1), and an unrelated CA."""
    require("openssl", shutil.which("openssl"), "apt-get install openssl")
    d = tmp_path_factory.mktemp("tls")
    for ca in ("ca", "other_ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN=perfkit test {ca}",
                 "-keyout", f"{ca}.key", "-out", f"{ca}.pem", cwd=d)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "server.key",
             "-out", "server.csr", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "san.ext", "-out", "server.pem", cwd=d)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=perfkit client", "-keyout", "client.key",
             "-out", "client.csr", cwd=d)  # fmt: skip
    _openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-out", "client.pem", cwd=d)  # fmt: skip
    pems = {name: d / f"{name}.pem" for name in ("ca", "other_ca", "server", "client")}
    return pems | {"key": d / "server.key", "client_key": d / "client.key"}


def _proxy(certs: dict[str, Path], port: int) -> TlsProxy:
    return TlsProxy(("127.0.0.1", port), str(certs["server"]), str(certs["key"]))


def _measured(out: Path) -> None:
    record = RunRecord.load(out)
    assert record.status == "ok"
    for level in record.levels:
        assert level.inference_count > 0 and level.error_count == 0, level


@pytest.mark.parametrize("workers", [1, 2])  # worker processes build their own context from the spec
def test_https_profile_through_tls(triton, certs, tmp_path, workers):
    out = tmp_path / "run.json"
    with _proxy(certs, triton.endpoints.http_port) as proxy:
        url = f"https://127.0.0.1:{proxy.port}"
        ca = str(certs["ca"])
        rc = main(["profile", *FAST, "-u", url, "--ssl-https-ca-certificates-file", ca, "--workers", str(workers),
                   "-o", str(out)])  # fmt: skip
        assert rc == ExitCode.OK
        # the metadata calls (urllib) and the load's connections (HTTP/1.1) both came through TLS
        assert proxy.handshakes >= 2
    _measured(out)


def test_grpc_profile_through_tls(triton, certs, tmp_path):
    out = tmp_path / "run.json"
    with _proxy(certs, triton.endpoints.grpc_port) as grpc, _proxy(certs, triton.endpoints.http_port) as admin:
        rc = main([
            "profile", *FAST, "-i", "grpc", "-u", f"127.0.0.1:{grpc.port}", "--ssl-grpc-use-ssl",
            "--ssl-grpc-root-certifications-file", str(certs["ca"]),
            "--admin-url", f"https://127.0.0.1:{admin.port}", "--ssl-https-ca-certificates-file", str(certs["ca"]),
            "-o", str(out),
        ])  # fmt: skip
        assert rc == ExitCode.OK
        assert grpc.handshakes >= 2 and admin.handshakes >= 1  # the check, then the load's HTTP/2 connections
    _measured(out)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_wrong_ca_fails_in_one_line(triton, certs, tmp_path, capsys, protocol):
    port = triton.endpoints.http_port if protocol == "http" else triton.endpoints.grpc_port
    with _proxy(certs, port) as proxy:
        if protocol == "http":
            argv = ["-u", f"https://127.0.0.1:{proxy.port}", "--ssl-https-ca-certificates-file", str(certs["other_ca"])]
        else:
            argv = ["-i", "grpc", "-u", f"127.0.0.1:{proxy.port}", "--admin-url", triton.endpoints.http_url,
                    "--ssl-grpc-use-ssl", "--ssl-grpc-root-certifications-file", str(certs["other_ca"])]  # fmt: skip
        rc = main(["profile", *FAST, *argv, "-o", str(tmp_path / "run.json")])
        assert proxy.handshakes == 0
    err = capsys.readouterr().err.strip()
    assert rc == ExitCode.SERVER, err
    assert len(err.splitlines()) == 1 and "certificate" in err and "verif" in err.lower(), err


def test_verify_peer_off_accepts_an_unknown_ca(triton, certs, tmp_path):
    out = tmp_path / "run.json"
    with _proxy(certs, triton.endpoints.http_port) as proxy:
        url = f"https://127.0.0.1:{proxy.port}"
        rc = main(["profile", *FAST, "-u", url, "--ssl-https-ca-certificates-file", str(certs["other_ca"]),
                   "--ssl-https-verify-peer", "0", "-o", str(out)])  # fmt: skip
        assert rc == ExitCode.OK and proxy.handshakes >= 2
    _measured(out)


def test_der_files_are_refused(certs, capsys):
    rc = main(["profile", *FAST, "-u", "https://127.0.0.1:1", "--ssl-https-client-certificate-type", "DER"])
    assert rc == ExitCode.USAGE
    assert "PEM" in capsys.readouterr().err


def test_grpc_mutual_tls_with_a_client_certificate(triton, certs, tmp_path):
    out = tmp_path / "run.json"
    pem = str(certs["server"]), str(certs["key"])
    with TlsProxy(("127.0.0.1", triton.endpoints.grpc_port), *pem, client_ca=str(certs["ca"])) as proxy:
        rc = main([
            "profile", *FAST, "-i", "grpc", "-u", f"127.0.0.1:{proxy.port}", "--admin-url", triton.endpoints.http_url,
            "--ssl-grpc-use-ssl", "--ssl-grpc-root-certifications-file", str(certs["ca"]),
            "--ssl-grpc-certificate-chain-file", str(certs["client"]),
            "--ssl-grpc-private-key-file", str(certs["client_key"]), "-o", str(out),
        ])  # fmt: skip
        assert rc == ExitCode.OK and proxy.handshakes >= 2
    _measured(out)


def test_https_mutual_tls_without_a_client_certificate_fails(triton, certs, tmp_path, capsys):
    pem = str(certs["server"]), str(certs["key"])
    with TlsProxy(("127.0.0.1", triton.endpoints.http_port), *pem, client_ca=str(certs["ca"])) as proxy:
        url = f"https://127.0.0.1:{proxy.port}"
        rc = main(["profile", *FAST, "-u", url, "--ssl-https-ca-certificates-file", str(certs["ca"])])
    assert rc == ExitCode.SERVER
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
