"""A tiny UDP DNS server on 127.0.0.1:53 for a loopback-only namespace (``loopback_resolver`` in
tests/real_parts.py): every query gets the same answer, ``nxdomain`` (an authoritative "no such name"),
``servfail`` (the resolver failed) or ``silent`` (nothing: the client times out, as with no network).

Run as ``python tests/loopback_dns.py MODE`` inside the namespace, as its root: it brings the loopback
interface up, binds, and returns once ready while a forked child serves (the namespace's end kills it).
See docs/reliability.md ("DNS").
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import sys

_RCODES = {"nxdomain": 3, "servfail": 2}
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def _loopback_up() -> None:
    """``ip link set lo up`` without iproute2: a new network namespace starts with lo down."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))


def answer(query: bytes, rcode: int) -> bytes | None:
    """The reply to ``query``: its id and question, QR, AA and RA set, ``rcode``, no records; None when it is
    too short to be a query."""
    if len(query) < 12:
        return None
    ident, flags = struct.unpack("!HH", query[:4])
    end = 12
    while end < len(query) and query[end] != 0:  # the question's name: length-prefixed labels
        end += 1 + query[end]
    question = query[12:end + 5]  # the name, its zero byte, QTYPE and QCLASS
    reply_flags = 0x8000 | (flags & 0x7900) | 0x0400 | 0x0080 | rcode  # QR, opcode+RD kept, AA, RA
    return struct.pack("!HHHHHH", ident, reply_flags, 1, 0, 0, 0) + question


def _serve(sock: socket.socket, mode: str) -> None:
    while True:
        query, peer = sock.recvfrom(4096)
        reply = answer(query, _RCODES[mode]) if mode in _RCODES else None
        if reply is not None:
            sock.sendto(reply, peer)


def main(mode: str) -> None:
    _loopback_up()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 53))
    if os.fork() == 0:  # the child serves with its output closed, so a caller's captured pipes end with the command
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        _serve(sock, mode)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
