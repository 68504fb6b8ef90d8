"""-H and --grpc-compression-algorithm on streamed requests, seen on the wire and answered by Triton.

A recording proxy (tests/support/faultproxy.py, record_bytes) sits in front of the real server: what perfkit
sent is on record, and the run's result says the server accepted it (Triton decompresses a gzip
stream message or fails the request).
"""

from __future__ import annotations

import re

from perfkit.cli import main
from perfkit.errors import ExitCode
from perfkit.records import RunRecord
from tests.support.faultproxy import FaultProxy

RUN = ["-m", "streamer", "--streaming", "--concurrency-range", "2", "-p", "300", "-r", "3", "-s", "999"]


def _hostport(url: str) -> tuple[str, int]:
    host, port = url.rsplit(":", 1)
    return host, int(port)


def _ok(out) -> None:
    (level,) = RunRecord.load(out).levels
    assert level.inference_count > 0 and level.error_count == 0, level.errors


def test_grpc_stream_carries_headers_and_compression(triton, tmp_path):
    out = tmp_path / "run.json"
    with FaultProxy(_hostport(triton.endpoints.grpc_url), h2=True, record_bytes=1 << 20) as proxy:
        rc = main(["profile", *RUN, "-i", "grpc", "-u", f"127.0.0.1:{proxy.port}",
                   "--admin-url", triton.endpoints.http_url, "-H", "X-Perfkit-Test:abc123",
                   "--grpc-compression-algorithm", "gzip", "-o", str(out)])  # fmt: skip
        sent = bytes(proxy.client_bytes)
    assert rc == ExitCode.OK
    _ok(out)
    # the stream's HEADERS: the header as metadata (lower-cased name) and the messages' encoding
    assert b"x-perfkit-test" in sent and b"abc123" in sent
    assert b"grpc-encoding\x04gzip" in sent
    # a message flagged compressed (1), its 4-byte length, then gzip's magic
    assert re.search(rb"\x01.{4}\x1f\x8b", sent, re.S)


def test_http_stream_carries_headers(triton, tmp_path):
    out = tmp_path / "run.json"
    with FaultProxy(_hostport(triton.endpoints.http_url), record_bytes=1 << 20) as proxy:
        rc = main(["profile", *RUN, "-i", "http", "-u", f"127.0.0.1:{proxy.port}", "-H", "X-Perfkit-Test:abc123",
                   "-o", str(out)])  # fmt: skip
        sent = bytes(proxy.client_bytes)
    assert rc == ExitCode.OK
    _ok(out)
    streamed = [head for head in sent.split(b"POST ")[1:] if b"/generate_stream " in head.split(b"\r\n", 1)[0]]
    heads = [h.split(b"\r\n\r\n", 1)[0] + b"\r\n" for h in streamed]
    bad = [h[:160] for h in heads if b"\r\nX-Perfkit-Test: abc123\r\n" not in h]
    assert streamed and not bad, bad


def test_unary_grpc_carries_headers_as_metadata(triton, tmp_path):
    """perf_analyzer's gRPC client sends -H as metadata on unary calls too (its docs say ignored; its code
    passes them); perfkit does the same."""
    out = tmp_path / "run.json"
    with FaultProxy(_hostport(triton.endpoints.grpc_url), h2=True, record_bytes=1 << 16) as proxy:
        rc = main(["profile", "-m", "identity", "-i", "grpc", "-u", f"127.0.0.1:{proxy.port}", "--admin-url",
                   triton.endpoints.http_url, "-H", "X-Perfkit-Test:abc123", "-p", "300", "-r", "3", "-s", "999",
                   "-o", str(out)])  # fmt: skip
        sent = bytes(proxy.client_bytes)
    assert rc == ExitCode.OK
    _ok(out)
    assert b"x-perfkit-test\x06abc123" in sent


def test_metadata_of_any_length_is_valid_hpack():
    """A long -H value (a bearer token, say) is encoded with HPACK's multi-byte lengths."""
    import hpack

    from perfkit.loadgen._h2 import header_block

    token = "Bearer " + "t" * 300
    block = header_block("h:1", "/p", "gzip", metadata=(("Authorization", token), ("X-A", "1")))
    assert hpack.Decoder().decode(block)[-3:] == [("grpc-encoding", "gzip"), ("authorization", token), ("x-a", "1")]


def test_compression_needs_grpc(capsys):
    """perf_analyzer's rule: compression only with -i grpc (one line, usage exit)."""
    rc = main(["profile", "-m", "identity", "-u", "127.0.0.1:1", "--grpc-compression-algorithm", "gzip"])
    assert rc == ExitCode.USAGE
    assert "only allowed with gRPC" in capsys.readouterr().err
