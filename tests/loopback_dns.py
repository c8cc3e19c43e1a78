"""A tiny UDP DNS server on 127.0.0.1:53 for a loopback-only namespace (``loopback_resolver`` in
tests/real_parts.py): every query gets the same answer, ``nxdomain`` (an authoritative "no such name"),
``servfail`` (the resolver failed) or ``silent`` (nothing: the client times out, as with no network); or
``rebind``, a name whose address changes under the asker (DNS rebinding): the first A query gets the public
``REBIND_FIRST``, every later one 127.0.0.1, each with a TTL of 0 (other types: no records).

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
REBIND_FIRST = "93.184.216.34"  # only ever an answer: the test that asks never connects to it
_TYPE_A = 1
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


def with_address(reply: bytes, address: str) -> bytes:
    """``reply`` (an answer with no records) with one A record for its question's name: ``address``, TTL 0."""
    ident, flags, questions = struct.unpack("!HHH", reply[:6])
    record = struct.pack("!HHHIH", 0xC00C, _TYPE_A, 1, 0, 4) + socket.inet_aton(address)  # the name: a pointer
    return struct.pack("!HHHHHH", ident, flags, questions, 1, 0, 0) + reply[12:] + record


def _rebinding(query: bytes, asked: list[int]) -> bytes | None:
    reply = answer(query, 0)
    if reply is None or struct.unpack("!H", reply[-4:-2])[0] != _TYPE_A:
        return reply
    asked.append(1)
    return with_address(reply, REBIND_FIRST if len(asked) == 1 else "127.0.0.1")


def _serve(sock: socket.socket, mode: str) -> None:
    asked: list[int] = []
    while True:
        query, peer = sock.recvfrom(4096)
        if mode == "rebind":
            reply = _rebinding(query, asked)
        else:
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
