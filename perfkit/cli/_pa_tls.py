"""perf_analyzer's TLS flags on `perfkit profile`: --ssl-https-* and --ssl-grpc-*.

As in perf_analyzer, HTTPS is taken when the -u URL says https:// (the --ssl-https-* flags then
say how), and gRPC goes over TLS with --ssl-grpc-use-ssl. perfkit's metadata and statistics calls
go over HTTP: with -i http they share the load's TLS; with -i grpc they take it when --admin-url
says https:// (with the --ssl-https-* flags).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from perfkit.errors import UsageError
from perfkit.records import TlsSpec

_FILE = click.Path(dir_okay=False, path_type=Path)  # read when the run starts (InputError names it)


def tls_options() -> Any:
    """Decorator adding perf_analyzer's --ssl-https-* and --ssl-grpc-* flags."""
    opts = [
        click.option("--ssl-https-verify-peer", type=click.Choice(["0", "1"]), default="1", show_default=True,
                     help="HTTPS: check the server's certificate chain (1) or not (0)."),
        click.option("--ssl-https-verify-host", type=click.Choice(["0", "1", "2"]), default="2", show_default=True,
                     help="HTTPS: check that the certificate names the server (1, 2) or not (0)."),
        click.option("--ssl-https-ca-certificates-file", type=_FILE, default=None,
                     help="HTTPS: PEM file of the CAs to trust (default: the system's)."),
        click.option("--ssl-https-client-certificate-file", type=_FILE, default=None,
                     help="HTTPS: PEM client certificate (mutual TLS)."),
        click.option("--ssl-https-client-certificate-type", default="PEM", show_default=True,
                     help="HTTPS: the client certificate's format; PEM only."),
        click.option("--ssl-https-private-key-file", type=_FILE, default=None,
                     help="HTTPS: PEM private key of the client certificate."),
        click.option("--ssl-https-private-key-type", default="PEM", show_default=True,
                     help="HTTPS: the private key's format; PEM only."),
        click.option("--ssl-grpc-use-ssl", is_flag=True, default=False, help="gRPC over TLS (ALPN h2)."),
        click.option("--ssl-grpc-root-certifications-file", type=_FILE, default=None,
                     help="gRPC TLS: PEM file of the CAs to trust (default: the system's)."),
        click.option("--ssl-grpc-private-key-file", type=_FILE, default=None,
                     help="gRPC TLS: PEM private key of the client certificate."),
        click.option("--ssl-grpc-certificate-chain-file", type=_FILE, default=None,
                     help="gRPC TLS: PEM client certificate chain (mutual TLS)."),
    ]  # fmt: skip

    def wrap(f: Any) -> Any:
        for opt in reversed(opts):
            f = opt(f)
        return f

    return wrap


def tls_specs(
    kw: dict[str, Any], *, url: str | None, admin_url: str | None, protocol: str
) -> tuple[TlsSpec | None, TlsSpec | None]:
    """(the load's TLS, the admin calls' TLS) from tls_options (consumed from kw); raises UsageError."""
    for flag in ("client_certificate_type", "private_key_type"):
        value = kw.pop(f"ssl_https_{flag}")
        if value.upper() != "PEM":
            raise UsageError(
                f"--ssl-https-{flag.replace('_', '-')} {value}: perfkit reads PEM files only",
                hint="convert it: openssl x509 -inform DER -in cert.der -out cert.pem (openssl pkey for a key)",
            )
    https = TlsSpec(
        ca_file=_str(kw.pop("ssl_https_ca_certificates_file")),
        cert_file=_str(kw.pop("ssl_https_client_certificate_file")),
        key_file=_str(kw.pop("ssl_https_private_key_file")),
        verify_peer=kw.pop("ssl_https_verify_peer") == "1",
        verify_host=kw.pop("ssl_https_verify_host") != "0",
    )
    use_grpc_tls = kw.pop("ssl_grpc_use_ssl")
    grpc = TlsSpec(
        ca_file=_str(kw.pop("ssl_grpc_root_certifications_file")),
        cert_file=_str(kw.pop("ssl_grpc_certificate_chain_file")),
        key_file=_str(kw.pop("ssl_grpc_private_key_file")),
    )
    if (https.cert_file is None) != (https.key_file is None) or (grpc.cert_file is None) != (grpc.key_file is None):
        raise UsageError("a TLS client certificate needs its private key, and a key its certificate")
    if protocol == "grpc":
        if use_grpc_tls and url is None:
            raise UsageError("--ssl-grpc-use-ssl needs -u HOST:PORT of a gRPC TLS endpoint")
        return (grpc if use_grpc_tls else None), (https if _is_https(admin_url) else None)
    if _is_https(url):
        return https, https
    return None, None


def _is_https(url: str | None) -> bool:
    return bool(url) and str(url).lower().startswith("https://")


def _str(path: Path | None) -> str | None:
    return None if path is None else str(path)
