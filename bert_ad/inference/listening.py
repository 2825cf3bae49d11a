"""Where bert-ad serve listens: the bound socket, its TLS context, and who can reach it.

The socket is bound before the models load, so a busy port or an address
that is not this machine's fails in one `error:` line at once, each with its
own cause (EADDRINUSE: another --port; EADDRNOTAVAIL: another --host;
EACCES: a port below 1024 needs privileges).
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import ssl
from typing import Optional

from bert_ad.errors import fail


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (port 0: a free one), or one `error:` line."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        listening = socket.socket(family, kind, proto)
    except OSError as e:
        fail(f"--host={host}: cannot listen there ({e.strerror or e}); give an address of "
             "this machine, e.g. 127.0.0.1 or 0.0.0.0")
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(address)
    except OSError as e:
        listening.close()
        why = e.strerror or str(e)
        if e.errno == errno.EADDRNOTAVAIL:
            fail(f"--host={host}: {address[0]} is not an address of this machine ({why}); "
                 "give one of its own, e.g. 127.0.0.1 or 0.0.0.0 (every interface)")
        if e.errno == errno.EACCES:
            fail(f"--port={port}: not allowed to listen there ({why}); ports below 1024 "
                 "need privileges: choose a higher --port")
        fail(f"--host={host} --port={port}: cannot listen there ({why}); choose another "
             "--port (0: any free one)")
    listening.setblocking(False)
    return listening


def is_loopback(listening: socket.socket) -> bool:
    """Whether only this machine can reach the socket (127.0.0.0/8, ::1)."""
    return ipaddress.ip_address(listening.getsockname()[0].split("%")[0]).is_loopback


def tls_context(cert: Optional[str], key: Optional[str]) -> Optional[ssl.SSLContext]:
    """The server's TLS context of --tls_cert/--tls_key (None: plain HTTP)."""
    if not cert and not key:
        return None
    if not (cert and key):
        fail("--tls_cert and --tls_key go together: the certificate (PEM, its chain after "
             "it) and its private key")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        fail(f"--tls_cert={cert} --tls_key={key}: not a certificate and its key "
             f"({getattr(e, 'strerror', None) or e})")
    return context
