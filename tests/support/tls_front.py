"""A TLS front for a running ces-eval, standing in for hosted CES's ``https://``: a small server
in a thread that ends TLS, with a certificate from a throw-away authority (tests/support/tls.py),
and forwards the bytes to the server's plain HTTP port. Real TLS (Python's ssl, OpenSSL), real
sockets; a client trusts the authority's file (``ces-eval run --ca-file`` or ``SSL_CERT_FILE``)."""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.tls import make_certificates

__all__ = ["TlsFront", "tls_front"]


@dataclass
class TlsFront:
    """Where the front listens: ``url`` is ``https://localhost:<port>`` (the certificate's
    name; it listens on 127.0.0.1)."""

    url: str
    authority: Path  # what a client trusts


def _pump(client: socket.socket, upstream: socket.socket) -> None:
    """Copy bytes both ways until either side closes (one thread: an SSL socket is not read and
    written from two threads at once)."""
    ends = {client: upstream, upstream: client}
    with contextlib.suppress(OSError):
        while True:
            if isinstance(client, ssl.SSLSocket) and client.pending():
                ready = [client]
            else:
                ready, _, _ = select.select(list(ends), [], [], 5.0)
            for end in ready:
                data = end.recv(65536)
                if not data:
                    return
                ends[end].sendall(data)


def _serve(listener: socket.socket, context: ssl.SSLContext, upstream: tuple[str, int]) -> None:
    def handle(raw: socket.socket) -> None:
        with (
            contextlib.suppress(OSError),
            raw,
            context.wrap_socket(raw, server_side=True) as tls,
            socket.create_connection(upstream, timeout=30) as plain,
        ):
            _pump(tls, plain)

    while True:
        try:
            raw, _ = listener.accept()
        except OSError:  # the listener was closed: the front stops
            return
        threading.Thread(target=handle, args=(raw,), daemon=True).start()


@contextlib.contextmanager
def tls_front(http_base: str, folder: Path) -> Iterator[TlsFront]:
    """A TLS front on a free port of 127.0.0.1 forwarding to ``http_base``
    (``http://host:port``), for the duration of the block."""
    certificates = make_certificates(folder)
    context = certificates.server_context()
    host, port = http_base.removeprefix("http://").rsplit(":", 1)
    listener = socket.create_server(("127.0.0.1", 0))
    thread = threading.Thread(
        target=_serve, args=(listener, context, (host, int(port))), daemon=True
    )
    thread.start()
    try:
        yield TlsFront(f"https://localhost:{listener.getsockname()[1]}", certificates.authority)
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() under way
        listener.close()
        thread.join(timeout=10)
