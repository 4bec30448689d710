"""A TLS front for a running ces-eval, standing in for hosted CES's ``https://``: a self-signed
certificate made with the ``openssl`` program, and a small server in a thread that ends TLS and
forwards the bytes to the server's plain HTTP port. Real TLS (Python's ssl, OpenSSL), real
sockets; the client trusts the certificate through ``ces-eval run --ca-file``."""

from __future__ import annotations

import contextlib
import select
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TlsFront", "self_signed", "tls_front"]


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, and its key (PEM files in ``folder``)."""
    certificate, key = folder / "cert.pem", folder / "key.pem"
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the TLS tests need the openssl program (Debian's openssl package)")
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(certificate),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return certificate, key


@dataclass
class TlsFront:
    """Where the front listens: ``url`` is ``https://localhost:<port>`` (the certificate's
    name; it listens on 127.0.0.1)."""

    url: str
    certificate: Path


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
    certificate, key = self_signed(folder)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    host, port = http_base.removeprefix("http://").rsplit(":", 1)
    listener = socket.create_server(("127.0.0.1", 0))
    thread = threading.Thread(
        target=_serve, args=(listener, context, (host, int(port))), daemon=True
    )
    thread.start()
    try:
        yield TlsFront(f"https://localhost:{listener.getsockname()[1]}", certificate)
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() under way
        listener.close()
        thread.join(timeout=10)
