"""A TLS-terminating TCP proxy for tests: loopback only, on its own thread.

Accepts TLS on 127.0.0.1 (an ssl server context: the test's certificate, ALPN h2 and
http/1.1 offered) and forwards the plaintext bytes to a real server's port, both ways.
`handshakes` counts completed TLS handshakes: proof the client spoke TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from typing import Any


class TlsProxy:
    def __init__(self, upstream: tuple[str, int], certfile: str, keyfile: str, client_ca: str | None = None) -> None:
        """client_ca: require a client certificate signed by it (mutual TLS)."""
        self.upstream = upstream
        self.handshakes = 0
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(certfile, keyfile)
        if client_ca:
            ctx.load_verify_locations(cafile=client_ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        self._ctx = ctx
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port: int = sock.getsockname()[1]
        self._sock = sock
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tlsproxy", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._accept, sock=self._sock, ssl=self._ctx))
        self._ready.set()
        self._loop.run_forever()

    async def _accept(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        self.handshakes += 1
        try:
            sr, sw = await asyncio.open_connection(*self.upstream)
        except OSError:
            cw.close()
            return
        await asyncio.gather(self._pipe(cr, sw), self._pipe(sr, cw))

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ssl.SSLError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(OSError, ssl.SSLError, RuntimeError):
            writer.close()

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> TlsProxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
