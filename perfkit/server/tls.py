"""Client-side TLS contexts from a TlsSpec (python's ssl module): the admin calls and the load's."""

from __future__ import annotations

import socket
import ssl

from perfkit.errors import InputError, ServerError
from perfkit.records import TlsSpec


def client_context(tls: TlsSpec, alpn: tuple[str, ...] = ()) -> ssl.SSLContext:
    """An SSLContext for tls; alpn e.g. ("h2",) for gRPC. Raises InputError for an unreadable file."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    try:
        if tls.ca_file:
            ctx.load_verify_locations(cafile=tls.ca_file)
        if tls.cert_file:
            ctx.load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as err:
        files = ", ".join(f for f in (tls.ca_file, tls.cert_file, tls.key_file) if f)
        raise InputError(f"TLS files {files}: cannot load them ({err})", hint="give PEM files") from None
    if not tls.verify_host or not tls.verify_peer:
        ctx.check_hostname = False
    if not tls.verify_peer:
        ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def check_handshake(tls: TlsSpec, host: str, port: int, alpn: tuple[str, ...] = (), timeout_s: float = 10.0) -> None:
    """One TLS handshake with host:port before the load starts; raises ServerError with why it failed."""
    ctx = client_context(tls, alpn)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw:
            with ctx.wrap_socket(raw, server_hostname=host):
                pass
    except ssl.SSLCertVerificationError as err:
        raise ServerError(
            f"TLS to {host}:{port}: the server's certificate failed verification ({err.verify_message})",
            hint="give the CA that signed it (--ssl-https-ca-certificates-file / --ssl-grpc-root-certifications-file)",
        ) from None
    except (OSError, ssl.SSLError) as err:
        raise ServerError(f"TLS to {host}:{port}: the handshake failed ({err})") from None
