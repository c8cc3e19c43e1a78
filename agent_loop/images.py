"""Checking and reading an image file before it goes to the model: every image is hostile until checked.

An image reaches the model from an ``@shot.png`` mention, ``dsh -p --image FILE``, a pasted path or ``read_file``
(docs/prompt.md, "Images"). The file may be anything: a FIFO, a 1 GB file, text renamed ``.png``, a header that
lies. So :func:`read_image` opens only a regular file (agent_loop/safe_open.py: never waits, ``follow_symlinks=False``
refuses a link), reads at most :data:`IMAGE_CAP_BYTES` + 1 bytes, and :func:`image_facts` reads the format and the
dimensions from the header by hand (dsh depends on no image library): PNG, JPEG, GIF and WebP only, a damaged
header refused, and more than :data:`MAX_PIXELS` pixels refused as a decompression bomb. The body is not decoded:
the header is what dsh vouches for. A refusal is :class:`NotAnImage`, whose text ends the user's line
``@shot.png: <reason>``.
"""

from __future__ import annotations

import errno
import os
import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh.agent_loop.extension_files import grouped, size_text
from dsh.agent_loop.safe_open import NotRegularFile, open_regular_fd

__all__ = ["IMAGE_CAP_BYTES", "MAX_PIXELS", "ImageFacts", "NotAnImage", "checked_image", "estimate_image_tokens",
           "image_facts", "image_format", "image_summary", "read_image", "too_big"]

IMAGE_CAP_BYTES = 10 * 1024 * 1024  # one image file at most; a larger one is refused, not cut
MAX_PIXELS = 7680 * 4320  # more pixels than 8K: a decompression bomb

_MEDIA_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WebP": "image/webp"}
_NOT_AN_IMAGE = "not an image: its bytes are not PNG, JPEG, GIF or WebP"
_READ_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class ImageFacts:
    """What the header of a checked image says."""

    format: str  # "PNG" | "JPEG" | "GIF" | "WebP"
    media_type: str  # "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    width: int
    height: int


class NotAnImage(ValueError):
    """An image refused: ``str(exc)`` is the reason, the tail of a user line ``@shot.png: <reason>`` (lower case,
    no final dot)."""


class _Damaged(Exception):
    """A header that is cut short or lies: becomes ``refused: its <format> header is damaged``."""


def image_format(head: bytes) -> str | None:
    """The format the magic bytes at the start of ``head`` (its first 16 bytes are enough) name, or None."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if head.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "GIF"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "WebP"
    return None


def _field(data: bytes, fmt: str, offset: int) -> tuple[Any, ...]:
    """``struct.unpack_from``, a header cut short being a damaged one."""
    if offset + struct.calcsize(fmt) > len(data):
        raise _Damaged
    return struct.unpack_from(fmt, data, offset)


def _png_size(data: bytes) -> tuple[int, int]:
    """The IHDR chunk, which must come first: length 13, its CRC right, each side at most 2**31 - 1."""
    length, kind = _field(data, ">I4s", 8)
    if length != 13 or kind != b"IHDR":
        raise _Damaged
    width, height = _field(data, ">II", 16)
    (crc,) = _field(data, ">I", 29)
    if zlib.crc32(data[12:29]) != crc or width > 0x7FFF_FFFF or height > 0x7FFF_FFFF:
        raise _Damaged
    return width, height


# SOF0..SOF15 carry the frame's size; C4 (DHT), C8 (JPG) and CC (DAC) share the range and do not.
_JPEG_FRAME = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_JPEG_NO_LENGTH = frozenset({0x01, *range(0xD0, 0xD8)})  # TEM and RST0..7 stand alone
_JPEG_MAX_SEGMENTS = 10_000  # real files have tens before the frame; a hostile one may have millions
_FILL = re.compile(rb"\xff+")


def _jpeg_size(data: bytes) -> tuple[int, int]:
    """Walk the markers after SOI to the first frame header: each step moves on by at least 2 bytes and at most
    :data:`_JPEG_MAX_SEGMENTS` steps are taken, so no length a file claims can make this loop forever."""
    pos = 2
    for _ in range(_JPEG_MAX_SEGMENTS):
        fill = _FILL.match(data, pos)  # a marker is 0xFF, then any run of 0xFF fill bytes, then its code
        if fill is None or fill.end() >= len(data):
            raise _Damaged
        marker = data[fill.end()]
        pos = fill.end() + 1
        if marker in _JPEG_NO_LENGTH:
            continue
        if marker in (0x00, 0xD8, 0xD9, 0xDA):  # a stuffed byte, a second SOI, the end or the scan: no frame came
            raise _Damaged
        (length,) = _field(data, ">H", pos)
        if length < 2:
            raise _Damaged
        if marker in _JPEG_FRAME:
            if length < 8:
                raise _Damaged
            height, width = _field(data, ">HH", pos + 3)  # after the length and the sample precision
            return width, height
        pos += length
    raise _Damaged


def _gif_size(data: bytes) -> tuple[int, int]:
    """The logical screen descriptor after the 6-byte signature (its 7 bytes whole)."""
    width, height, _flags, _background, _aspect = _field(data, "<HHBBB", 6)
    return width, height


def _webp_size(data: bytes) -> tuple[int, int]:
    """RIFF....WEBP, then the first chunk: VP8 (lossy), VP8L (lossless) or VP8X (extended, the canvas size)."""
    (riff_size,) = _field(data, "<I", 4)
    kind, chunk_size = _field(data, "<4sI", 12)
    if riff_size < 4 + 8 + chunk_size:
        raise _Damaged
    if kind == b"VP8 ":
        tag, start, width, height = _field(data, "<3s3sHH", 20)
        if chunk_size < 10 or tag[0] & 1 or start != b"\x9d\x01\x2a":  # a key frame, with its start code
            raise _Damaged
        return width & 0x3FFF, height & 0x3FFF  # the top 2 bits are an upscaling hint, not the size
    if kind == b"VP8L":
        signature, bits = _field(data, "<BI", 20)
        if chunk_size < 5 or signature != 0x2F or bits >> 29:  # the version (3 bits) must be 0
            raise _Damaged
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if kind == b"VP8X":
        (canvas,) = _field(data, "<6s", 24)
        if chunk_size < 10:
            raise _Damaged
        return int.from_bytes(canvas[:3], "little") + 1, int.from_bytes(canvas[3:], "little") + 1
    raise _Damaged


_SIZE_READERS: dict[str, Callable[[bytes], tuple[int, int]]] = {
    "PNG": _png_size, "JPEG": _jpeg_size, "GIF": _gif_size, "WebP": _webp_size,
}  # fmt: skip


def image_facts(data: bytes) -> ImageFacts:
    """The format and size of the image ``data`` holds, read from its header; raises :class:`NotAnImage`."""
    kind = image_format(data[:16])
    if kind is None:
        raise NotAnImage(_NOT_AN_IMAGE)
    try:
        width, height = _SIZE_READERS[kind](data)
    except _Damaged:
        width = height = 0
    if width <= 0 or height <= 0:
        raise NotAnImage(f"refused: its {kind} header is damaged")
    if width * height > MAX_PIXELS:
        raise NotAnImage(f"refused: {grouped(width)}×{grouped(height)} pixels is a decompression bomb "
                         f"(at most {grouped(MAX_PIXELS)})")
    return ImageFacts(kind, _MEDIA_TYPES[kind], width, height)


def too_big(size: int) -> NotAnImage:
    """Why an image of ``size`` bytes is refused: over :data:`IMAGE_CAP_BYTES`."""
    return NotAnImage(f"refused: {size_text(size)} is over the {IMAGE_CAP_BYTES // 1024 ** 2} MiB cap for an image")


def _open(path: Path, follow_symlinks: bool) -> tuple[int, os.stat_result]:
    """The file opened, or the reason it is not: never waits on a FIFO or a device."""
    try:
        return open_regular_fd(path, follow_symlinks=follow_symlinks)
    except NotRegularFile as exc:
        raise NotAnImage(f"refused: it is {exc.kind}, not a regular file") from None
    except FileNotFoundError:
        raise NotAnImage("no such file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise NotAnImage("refused: it is a symlink, not a regular file") from None
        raise NotAnImage(f"it cannot be read ({exc.strerror or type(exc).__name__})") from None


def read_image(path: Path, *, follow_symlinks: bool = True) -> tuple[bytes, ImageFacts]:
    """The bytes of the image file at ``path`` and what its header says; raises :class:`NotAnImage`.

    A file over :data:`IMAGE_CAP_BYTES` by its size is refused unread; one that grows past it while read is
    refused after at most cap + 1 bytes.
    """
    fd, info = _open(path, follow_symlinks)
    try:
        if info.st_size > IMAGE_CAP_BYTES:
            raise too_big(info.st_size)
        chunks: list[bytes] = []
        remaining = IMAGE_CAP_BYTES + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, _READ_CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    except OSError as exc:
        raise NotAnImage(f"it cannot be read ({exc.strerror or type(exc).__name__})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > IMAGE_CAP_BYTES:
        raise too_big(max(len(data), info.st_size))
    return data, image_facts(data)


def checked_image(data: bytes) -> ImageFacts:
    """What an image given as bytes (an editor's, over ACP) is, checked as a file's is: the cap, the header, the
    pixels; raises :class:`NotAnImage`."""
    if len(data) > IMAGE_CAP_BYTES:
        raise too_big(len(data))
    return image_facts(data)


def estimate_image_tokens(width: int, height: int) -> int:
    """About how many input tokens an image of ``width`` × ``height`` pixels costs: an estimate, not a count.

    The formula is OpenAI's documented one for ``detail: high``: the image is scaled down to fit within
    2048 × 2048, then down so its shortest side is 768 px (never up), and costs 170 tokens per 512-px tile it
    spans plus 85 (1024 × 1024 → 765; 2048 × 4096 → 1105). dsh's endpoints speak OpenAI's API and DeepSeek
    publishes no formula of its own, so this is the best public guess. A side of 0 or less costs the 85 alone.
    """
    if width <= 0 or height <= 0:
        return 85
    num, den = 1, 1  # the scale, kept as a fraction so a tile boundary is not missed by rounding
    if max(width, height) > 2048:
        num, den = 2048, max(width, height)
    if min(width, height) * num > 768 * den:
        num, den = 768, min(width, height)  # the shortest side becomes exactly 768
    across = -(-width * num // (den * 512))
    down = -(-height * num // (den * 512))
    return 170 * across * down + 85


def image_summary(facts: ImageFacts, size: int) -> str:
    """One line about an image: ``PNG 1280×720, 245 KiB, ~1 105 tokens``."""
    tokens = grouped(estimate_image_tokens(facts.width, facts.height))
    return f"{facts.format} {facts.width}×{facts.height}, {size_text(size)}, ~{tokens} tokens"
