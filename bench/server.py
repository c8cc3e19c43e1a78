"""The bench's own loopback stream server: pre-encoded responses written in large batches.

Runs in its own process (``python -m bench.server``) so serving costs the measured client no GIL
time. Every client under test (dsh, the raw-httpx floors, the openai SDK) is served the identical
bytes. The stream is named by the first path segment: ``POST /<stream>/chat/completions``, so a
base URL of ``http://127.0.0.1:<port>/<stream>`` works for dsh and the openai SDK alike.

Stream names:

``tiny-N``        N one-to-three-character content deltas (``dsh.llm.loopback.streams.huge_text_blob``)
``tiny-N-xK``     the same N-delta body sent K times in one stream (10x scaling without 10x memory)
``tool-N``        N reasoning deltas, then two tool calls whose arguments arrive in N/2 fragments each
``text``          a short plain answer (the loop, subagent and startup benchmarks)
``ttft``          the first content delta in the very first write, then the rest

The parent reads the port from the first stdout line and stops the server by closing its stdin.
"""

from __future__ import annotations

import json
import random
import re
import socket
import socketserver
import sys
import threading
from functools import lru_cache

from dsh.llm.loopback.streams import (
    DONE,
    chunk,
    frame,
    huge_text_blob,
    join_frames,
    text_frames,
    usage_chunk,
)

__all__ = ["build_stream", "serve_forever"]

_BATCH = 256 * 1024  # bytes per HTTP chunk: big writes, so the client's cost is parsing, not syscalls
_HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"content-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n"
    b"x-request-id: bench-0001\r\n"
    b"\r\n"
)
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
_TINY = re.compile(r"tiny-(\d+)(?:-x(\d+))?")
_TOOL = re.compile(r"tool-(\d+)")
_ALPHABET = "abcdefghijklmnopqrstuvwxyz     ,.\n"


def _chunked(data: bytes) -> list[bytes]:
    """HTTP/1.1 chunked framing in ``_BATCH``-sized pieces (without the terminating chunk)."""
    return [
        b"%x\r\n" % len(part) + part + b"\r\n"
        for part in (data[i : i + _BATCH] for i in range(0, len(data), _BATCH))
    ]


def _tiny(n: int, repeat: int) -> list[bytes]:
    blob, _ = huge_text_blob(n)
    opener_end = blob.index(b"\n\n") + 2
    done_at = len(blob) - len(DONE)
    tail_start = blob.rindex(b"data: ", 0, blob.rindex(b"data: ", 0, done_at))  # finish + usage + DONE
    opener, body, tail = blob[:opener_end], blob[opener_end:tail_start], blob[tail_start:]
    segments = _chunked(opener)
    body_chunks = _chunked(body)
    for _ in range(repeat):
        segments += body_chunks
    return segments + _chunked(tail)


def _pieces(rng: random.Random, text: str) -> list[str]:
    pieces, at = [], 0
    while at < len(text):
        size = rng.randint(1, 3)
        pieces.append(text[at : at + size])
        at += size
    return pieces


def _tool(n: int) -> list[bytes]:
    rng = random.Random(7)
    frames = [frame(chunk({"role": "assistant", "content": None, "reasoning_content": ""}))]
    frames += [
        frame(chunk({"content": None, "reasoning_content": "".join(rng.choices(_ALPHABET, k=rng.randint(1, 3)))}))
        for _ in range(n)
    ]
    for index, name in enumerate(("write_file", "run_shell")):
        body = "".join(rng.choices(_ALPHABET, k=n))  # ~n chars -> ~n/2 fragments of 1-3 chars
        arguments = json.dumps({"path": f"notes/{name}.txt", "content": body})
        opener = {"index": index, "id": f"call_0{index}_bench", "type": "function",
                  "function": {"name": name, "arguments": ""}}
        frames.append(frame(chunk({"tool_calls": [opener]})))
        frames += [
            frame(chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
            for piece in _pieces(rng, arguments)
        ]
    frames.append(frame(chunk({"content": None}, finish_reason="tool_calls")))
    frames.append(frame(usage_chunk(180, n, cache_hit=128, reasoning_tokens=n)))
    frames.append(DONE)
    return _chunked(join_frames(frames))


def _ttft() -> list[bytes]:
    first = frame(chunk({"role": "assistant", "content": "Hi"}))
    rest = join_frames(text_frames(" there, this is the rest of a short answer.")[1:])
    return [_HEAD + b"%x\r\n" % len(first) + first + b"\r\n", *_chunked(rest), b"0\r\n\r\n"]


@lru_cache(maxsize=16)
def build_stream(name: str) -> tuple[bytes, ...] | None:
    """The whole response (status line, headers, chunked body) as write-ready segments."""
    if name == "ttft":
        return tuple(_ttft())
    if name == "text":
        body = _chunked(join_frames(text_frames("Hello from the bench server.")))
    elif match := _TINY.fullmatch(name):
        body = _tiny(int(match[1]), int(match[2] or 1))
    elif match := _TOOL.fullmatch(name):
        body = _tool(int(match[1]))
    else:
        return None
    # The first segment carries headers too, so a response is one write plus body batches.
    return (_HEAD + body[0], *body[1:], b"0\r\n\r\n")


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = sock.makefile("rb")
        try:
            while self._one(sock, reader):
                pass
        except OSError:
            pass  # the client hung up mid-response (a benchmark that stops early): fine
        finally:
            reader.close()

    def _one(self, sock: socket.socket, reader) -> bool:  # type: ignore[no-untyped-def]
        request_line = reader.readline()
        if not request_line:
            return False
        length = 0
        while True:
            line = reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        if length:
            reader.read(length)
        parts = request_line.split(b" ")
        path = parts[1].decode("ascii", "replace") if len(parts) > 1 else "/"
        segments = build_stream(path.strip("/").split("/", 1)[0])
        if segments is None:
            sock.sendall(_NOT_FOUND)
            return True
        for segment in segments:
            sock.sendall(segment)
        return True


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64


def serve_forever(preload: list[str]) -> None:
    for name in preload:
        build_stream(name)
    with _Server(("127.0.0.1", 0), _Handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        print(server.server_address[1], flush=True)
        sys.stdin.read()  # the parent closes our stdin to stop us
        server.shutdown()


if __name__ == "__main__":
    serve_forever(sys.argv[1:])
