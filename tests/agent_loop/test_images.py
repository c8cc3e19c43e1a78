"""The image checker and reader (``dsh.agent_loop.images``) on image bytes built by hand, and hostile files.

Every image here is built with zlib and struct, so no image library or binary is needed. A read that waited on
a FIFO or looped on a hostile length would hang: the timeout is the hang guard, not a speed bound.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh.agent_loop.images import (
    IMAGE_CAP_BYTES,
    MAX_PIXELS,
    ImageFacts,
    NotAnImage,
    estimate_image_tokens,
    image_facts,
    image_format,
    image_summary,
    read_image,
)

pytestmark = pytest.mark.timeout(60)

NOT_AN_IMAGE = "not an image: its bytes are not PNG, JPEG, GIF or WebP"


# --- images built by hand ---------------------------------------------------------------------------


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png(width: int, height: int, *, pixels: bool = True) -> bytes:
    """A valid 8-bit greyscale PNG (its pixel rows only when small enough to build)."""
    ihdr = _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
    rows = zlib.compress(b"".join(b"\0" + bytes(width) for _ in range(height))) if pixels else b""
    return b"\x89PNG\r\n\x1a\n" + ihdr + _chunk(b"IDAT", rows) + _chunk(b"IEND", b"")


def _segment(marker: int, body: bytes) -> bytes:
    return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body


def jpeg(width: int, height: int, *, frame: int = 0xC0, before: bytes = b"") -> bytes:
    """A baseline (or ``frame``) JPEG's headers: JFIF, a quantization table, ``before``, the frame, Huffman, scan."""
    jfif = _segment(0xE0, b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0")
    dqt = _segment(0xDB, b"\0" + bytes(range(1, 65)))
    sof = _segment(frame, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00")
    dht = _segment(0xC4, b"\0" + bytes([1] + [0] * 15) + b"\0")
    sos = _segment(0xDA, b"\x01\x01\x00\x00\x3f\x00")
    return b"\xff\xd8" + jfif + dqt + before + sof + dht + sos + b"\x00\x00\xff\xd9"


def gif(width: int, height: int) -> bytes:
    """A GIF89a with a 2-colour table and one 1×1 image on its logical screen."""
    screen = b"GIF89a" + struct.pack("<HHBBB", width, height, 0x80, 0, 0) + b"\0\0\0\xff\xff\xff"
    image = b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00"
    return screen + image + b";"


def _riff(*chunks: tuple[bytes, bytes]) -> bytes:
    """A RIFF WEBP file of ``(kind, body)`` chunks, each padded to an even length."""
    body = b"".join(kind + struct.pack("<I", len(data)) + data + b"\0" * (len(data) % 2) for kind, data in chunks)
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WEBP" + body


def webp_lossy(width: int, height: int) -> bytes:
    """A VP8 key frame header: frame tag, start code, 14-bit sides (here with the upscaling bits set)."""
    frame = b"\x50\x02\x00" + b"\x9d\x01\x2a" + struct.pack("<HH", width | 0x4000, height | 0x8000) + bytes(8)
    return _riff((b"VP8 ", frame))


def webp_lossless(width: int, height: int) -> bytes:
    bits = (width - 1) | (height - 1) << 14 | 1 << 28  # alpha used, version 0
    return _riff((b"VP8L", b"\x2f" + struct.pack("<I", bits) + bytes(4)))


def webp_extended(width: int, height: int) -> bytes:
    canvas = (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return _riff((b"VP8X", b"\x10\0\0\0" + canvas), (b"VP8L", b"\x2f" + bytes(8)))


# (name, builder, format, media type, the header's end: the bytes needed to know the size)
FORMATS: list[tuple[str, Callable[[int, int], bytes], str, str, int]] = [
    ("png", png, "PNG", "image/png", 33),
    ("jpeg", jpeg, "JPEG", "image/jpeg", 2 + 18 + 69 + 9),  # SOI, JFIF, DQT, the frame to its width
    ("gif", gif, "GIF", "image/gif", 13),
    ("webp-lossy", webp_lossy, "WebP", "image/webp", 30),
    ("webp-lossless", webp_lossless, "WebP", "image/webp", 25),
    ("webp-extended", webp_extended, "WebP", "image/webp", 30),
]
BUILDERS = [pytest.param(build, fmt, media, end, id=name) for name, build, fmt, media, end in FORMATS]


def _reason(data: bytes) -> str:
    with pytest.raises(NotAnImage) as caught:
        image_facts(data)
    return str(caught.value)


# --- facts ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("build", "fmt", "media", "end"), BUILDERS)
def test_each_format_gives_its_format_media_type_and_size(
    build: Callable[[int, int], bytes], fmt: str, media: str, end: int
) -> None:
    data = build(37, 5)
    assert image_format(data[:16]) == fmt
    assert image_facts(data) == ImageFacts(fmt, media, 37, 5)


def test_a_jpeg_frame_is_found_past_exif_tables_restarts_and_fill_bytes() -> None:
    exif = _segment(0xE1, b"Exif\0\0" + bytes(3000))
    # DHT, JPG and DAC sit among the frame markers but carry no size: they are passed over
    decoys = b"".join(_segment(m, struct.pack(">BHHB", 8, 9999, 9999, 1)) for m in (0xC4, 0xC8, 0xCC))
    data = jpeg(640, 480, frame=0xC2, before=exif + decoys + b"\xff\xd0" + b"\xff" * 50)
    assert image_facts(data) == ImageFacts("JPEG", "image/jpeg", 640, 480)


@pytest.mark.parametrize("frame", [m for m in range(0xC0, 0xD0) if m not in (0xC4, 0xC8, 0xCC)])
def test_every_jpeg_frame_kind_gives_the_size(frame: int) -> None:
    assert image_facts(jpeg(3, 2, frame=frame)).width == 3


def test_an_image_of_exactly_the_most_pixels_is_accepted_and_one_more_row_is_a_bomb() -> None:
    assert image_facts(png(7680, 4320, pixels=False)).height == 4320
    assert _reason(png(7680, 4321, pixels=False)) == (
        "refused: 7 680×4 321 pixels is a decompression bomb (at most 33 177 600)"
    )


@pytest.mark.parametrize(
    ("data", "size"),
    [
        (png(100_000, 100_000, pixels=False), "100 000×100 000"),
        (jpeg(65535, 65535), "65 535×65 535"),
        (gif(65535, 65535), "65 535×65 535"),
        (webp_lossless(16384, 16384), "16 384×16 384"),
        (webp_extended(1 << 24, 1 << 24), "16 777 216×16 777 216"),
    ],
    ids=["png", "jpeg", "gif", "webp-lossless", "webp-extended"],
)
def test_a_small_file_whose_header_claims_a_huge_image_is_a_decompression_bomb(data: bytes, size: str) -> None:
    assert len(data) < 200
    assert _reason(data) == f"refused: {size} pixels is a decompression bomb (at most 33 177 600)"
    assert MAX_PIXELS == 33_177_600


# --- damaged headers --------------------------------------------------------------------------------


@pytest.mark.parametrize(("build", "fmt", "media", "end"), BUILDERS)
def test_every_cut_of_a_header_is_refused_and_a_cut_after_it_is_not(
    build: Callable[[int, int], bytes], fmt: str, media: str, end: int
) -> None:
    data = build(20, 10)
    magic = {"PNG": 8, "JPEG": 3, "GIF": 6, "WebP": 12}[fmt]
    for cut in range(len(data) + 1):
        head = data[:cut]
        if cut < magic:
            assert _reason(head) == NOT_AN_IMAGE, cut
        elif cut < end:
            assert _reason(head) == f"refused: its {fmt} header is damaged", cut
        else:
            assert image_facts(head) == ImageFacts(fmt, media, 20, 10), cut


@pytest.mark.parametrize(("build", "fmt"), [(png, "PNG"), (jpeg, "JPEG"), (gif, "GIF"), (webp_lossy, "WebP")])
@pytest.mark.parametrize(("width", "height"), [(0, 5), (5, 0), (0, 0)])
def test_a_side_of_zero_pixels_is_a_damaged_header(build: Callable[[int, int], bytes], fmt: str, width: int,
                                                    height: int) -> None:
    assert _reason(build(width, height)) == f"refused: its {fmt} header is damaged"


@pytest.mark.parametrize(
    "data",
    [
        png(4, 4)[:29] + b"\0\0\0\0" + png(4, 4)[33:],  # the IHDR's CRC is wrong
        png(4, 4)[:8] + struct.pack(">I", 14) + png(4, 4)[12:],  # the IHDR is not 13 bytes
        png(4, 4)[:8] + _chunk(b"tEXt", b"k\0" + bytes(11)) + png(4, 4)[8:],  # IHDR is not first
        png(4, 4)[:8] + _chunk(b"IHDR", struct.pack(">IIBBBBB", 1 << 31, 1, 8, 0, 0, 0, 0)),  # a side over 2**31 - 1
    ],
    ids=["bad-crc", "bad-length", "not-first", "too-wide"],
)
def test_a_png_header_that_lies_is_damaged(data: bytes) -> None:
    assert _reason(data) == "refused: its PNG header is damaged"


@pytest.mark.parametrize(
    "data",
    [
        webp_lossy(4, 4)[:4] + struct.pack("<I", 8) + webp_lossy(4, 4)[8:],  # RIFF smaller than its chunk
        webp_lossy(4, 4)[:20] + b"\x51" + webp_lossy(4, 4)[21:],  # not a key frame
        webp_lossy(4, 4)[:23] + b"\x9d\x01\x2b" + webp_lossy(4, 4)[26:],  # no start code
        webp_lossless(4, 4)[:20] + b"\x2e" + webp_lossless(4, 4)[21:],  # no signature
        webp_lossless(4, 4)[:24] + b"\x20" + webp_lossless(4, 4)[25:],  # version 1
        _riff((b"ALPH", bytes(20))),  # no image chunk first
    ],
    ids=["riff-short", "not-key-frame", "no-start-code", "no-signature", "version", "other-chunk"],
)
def test_a_webp_header_that_lies_is_damaged(data: bytes) -> None:
    assert _reason(data) == "refused: its WebP header is damaged"


@pytest.mark.parametrize(
    "tail",
    [
        b"\xff\xfe\x00\x00",  # a comment of length 0
        b"\xff\xfe\x00\x01",  # of length 1
        b"\xff\xfe\x00\x02" * 4,  # empty comments, then the end of the bytes
        b"\xff\xc0\x00\x02",  # a frame too short to hold its size
        b"\xff\xda\x00\x08",  # the scan before any frame
        b"\xff\xd9",  # the end before any frame
        b"\xff\x00",  # a stuffed byte where a marker belongs
        b"\xff\xe0\x00\x02\x00\xff\xc0",  # a byte that is no marker after a segment
        b"\xff" * 1000,  # a fill run to the end
    ],
)
def test_hostile_jpeg_markers_are_a_damaged_header(tail: bytes) -> None:
    assert _reason(b"\xff\xd8" + tail) == "refused: its JPEG header is damaged"


def test_ten_megabytes_of_fill_or_of_empty_segments_is_refused_at_once() -> None:
    for body in (b"\xff" * IMAGE_CAP_BYTES, b"\xff\xfe\x00\x02" * (IMAGE_CAP_BYTES // 4)):
        started = time.monotonic()
        assert _reason(b"\xff\xd8" + body) == "refused: its JPEG header is damaged"
        assert time.monotonic() - started < 5


# --- fuzzing: nothing but NotAnImage, ever ---------------------------------------------------------


def _facts_or_reason(data: bytes) -> ImageFacts | str:
    try:
        facts = image_facts(data)
    except NotAnImage as exc:
        return str(exc)
    assert facts.width > 0 and facts.height > 0 and facts.width * facts.height <= MAX_PIXELS
    return facts


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_give_facts_or_a_reason_and_nothing_else(data: bytes) -> None:
    _facts_or_reason(data)


@settings(max_examples=1000, deadline=None)
@given(st.sampled_from([b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR", b"\xff\xd8\xff", b"GIF87a", b"GIF89a",
                        b"RIFF\xff\xff\xff\xffWEBPVP8 ", b"RIFF\xff\xff\xff\xffWEBPVP8L",
                        b"RIFF\xff\xff\xff\xffWEBPVP8X"]),
       st.binary(max_size=64))
def test_a_real_magic_with_random_bytes_after_it_gives_facts_or_a_reason(magic: bytes, tail: bytes) -> None:
    result = _facts_or_reason(magic + tail)
    assert result != NOT_AN_IMAGE


_MARKERS = st.integers(0, 255)
_SEGMENT = st.one_of(
    st.tuples(_MARKERS, st.sampled_from([0, 1, 2, 3, 7, 8, 0xFFFF]), st.binary(max_size=12)).map(
        lambda t: bytes([0xFF, t[0]]) + struct.pack(">H", t[1]) + t[2]),
    st.integers(1, 300).map(lambda n: b"\xff" * n),
    st.binary(max_size=8),
)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_SEGMENT, max_size=30))
def test_jpeg_segments_with_hostile_lengths_give_facts_or_a_reason(segments: list[bytes]) -> None:
    result = _facts_or_reason(b"\xff\xd8\xff" + b"".join(segments))  # the third byte: the magic, or fill
    assert result != NOT_AN_IMAGE


# --- files ------------------------------------------------------------------------------------------


def _read_reason(path: Path, *, follow_symlinks: bool = True) -> str:
    with pytest.raises(NotAnImage) as caught:
        read_image(path, follow_symlinks=follow_symlinks)
    return str(caught.value)


def test_an_image_file_is_read_whole_with_its_facts(tmp_path: Path) -> None:
    data = png(1280, 720)
    (tmp_path / "shot.png").write_bytes(data)
    assert read_image(tmp_path / "shot.png") == (data, ImageFacts("PNG", "image/png", 1280, 720))


def test_a_text_file_renamed_png_is_not_an_image(tmp_path: Path) -> None:
    (tmp_path / "shot.png").write_text("just some notes\n", encoding="utf-8")
    assert _read_reason(tmp_path / "shot.png") == NOT_AN_IMAGE
    (tmp_path / "empty.png").write_bytes(b"")
    assert _read_reason(tmp_path / "empty.png") == NOT_AN_IMAGE


def test_a_fifo_is_refused_at_once_without_waiting_for_a_writer(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "shot.png")
    assert _read_reason(tmp_path / "shot.png") == "refused: it is a FIFO, not a regular file"


def test_a_directory_or_a_device_is_refused(tmp_path: Path) -> None:
    (tmp_path / "shots.png").mkdir()
    assert _read_reason(tmp_path / "shots.png") == "refused: it is a directory, not a regular file"
    assert _read_reason(Path("/dev/zero")) == "refused: it is a character device, not a regular file"


def test_a_symlink_is_refused_when_links_are_not_followed(tmp_path: Path) -> None:
    (tmp_path / "real.png").write_bytes(png(2, 2))
    (tmp_path / "shot.png").symlink_to(tmp_path / "real.png")
    assert _read_reason(tmp_path / "shot.png", follow_symlinks=False) == "refused: it is a symlink, not a regular file"
    assert read_image(tmp_path / "shot.png")[1].width == 2


def test_a_missing_file_or_a_path_through_a_file_says_why(tmp_path: Path) -> None:
    assert _read_reason(tmp_path / "gone.png") == "no such file"
    assert _read_reason(tmp_path / "gone" / "shot.png") == "no such file"
    (tmp_path / "file").write_bytes(b"")
    assert _read_reason(tmp_path / "file" / "shot.png") == "it cannot be read (Not a directory)"


_READ_AS_CHILD = """
import os, sys
from pathlib import Path
from dsh.agent_loop.images import NotAnImage, read_image
if os.geteuid() == 0:
    os.setgid(65534)
    os.setuid(65534)  # root reads a file whatever its mode: nobody does not
try:
    read_image(Path(sys.argv[1]))
except NotAnImage as why:
    print(why)
"""


def test_an_unreadable_file_says_permission_denied(tmp_path: Path) -> None:
    shots = tmp_path / "shots"
    shots.mkdir(mode=0o755)
    tmp_path.chmod(0o755)  # nobody may walk to it (pytest's folders above are the runner's)
    (shots / "locked.png").write_bytes(png(2, 2))
    (shots / "locked.png").chmod(0)
    reachable = all(os.stat(folder).st_mode & 0o001 for folder in (shots, *shots.parents))
    if os.geteuid() == 0 and not reachable:  # a parent folder only root may walk: copy the test to /tmp itself
        shots = Path(tempfile.mkdtemp(prefix="dsh-images-"))
        shots.chmod(0o755)
        (shots / "locked.png").write_bytes(png(2, 2))
        (shots / "locked.png").chmod(0)
    try:
        done = subprocess.run([sys.executable, "-c", _READ_AS_CHILD, str(shots / "locked.png")], capture_output=True,
                              text=True, timeout=60, check=False)
    finally:
        if shots.parent != tmp_path:
            shutil.rmtree(shots)
    assert (done.returncode, done.stdout, done.stderr) == (0, "it cannot be read (Permission denied)\n", "")


def _bytes_read() -> int | None:
    """This process's ``rchar`` (bytes read by any syscall), or None off Linux."""
    try:
        text = Path("/proc/self/io").read_text(encoding="ascii")
    except OSError:
        return None
    return int(next(line for line in text.splitlines() if line.startswith("rchar:")).split()[1])


@pytest.mark.parametrize(
    ("size", "reason"),
    [
        (1024 ** 3, "refused: 1.0 GiB is over the 10 MiB cap for an image"),
        (int(12.3 * 1024 ** 2), "refused: 12.3 MiB is over the 10 MiB cap for an image"),
        (IMAGE_CAP_BYTES + 1, "refused: 10.0 MiB is over the 10 MiB cap for an image"),
    ],
    ids=["1GiB", "12.3MiB", "cap+1"],
)
def test_a_file_over_the_cap_is_refused_without_reading_it_whole(tmp_path: Path, size: int, reason: str) -> None:
    path = tmp_path / "huge.png"
    path.write_bytes(png(2, 2))
    os.truncate(path, size)  # sparse: the test costs no disk
    before = _bytes_read()
    assert _read_reason(path) == reason
    after = _bytes_read()
    if before is not None and after is not None:
        assert after - before <= IMAGE_CAP_BYTES + 1


def test_a_file_of_exactly_the_cap_is_read(tmp_path: Path) -> None:
    path = tmp_path / "big.png"
    path.write_bytes(png(2, 2))
    os.truncate(path, IMAGE_CAP_BYTES)
    data, facts = read_image(path)
    assert len(data) == IMAGE_CAP_BYTES
    assert facts == ImageFacts("PNG", "image/png", 2, 2)


# --- tokens and the summary line --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("width", "height", "tokens"),
    [
        (1024, 1024, 765),  # OpenAI's example: scaled to 768×768, 4 tiles
        (2048, 4096, 1105),  # OpenAI's example: 1024×2048, then 768×1536, 6 tiles
        (4096, 8192, 1105),  # the same shape, larger: the same cost
        (1280, 720, 1105),  # shortest side under 768: not scaled up, 3×2 tiles
        (512, 512, 255),  # exactly one tile
        (513, 512, 425),  # one pixel more: two
        (16, 16, 255),
        (20000, 10, 765),  # 2048×1 after fitting: 4 tiles in one row
        (8000, 3000, 1445),  # 2048×768 after fitting: the most tiles there are, 4×2
        (0, 100, 85),
    ],
)
def test_token_estimates_follow_openais_high_detail_formula(width: int, height: int, tokens: int) -> None:
    assert estimate_image_tokens(width, height) == tokens


@given(st.integers(1, 1 << 24), st.integers(1, 1 << 24))
def test_a_token_estimate_is_a_whole_number_of_tiles_at_most_what_2048_by_768_costs(width: int, height: int) -> None:
    tokens = estimate_image_tokens(width, height)
    assert (tokens - 85) % 170 == 0
    assert 255 <= tokens <= 85 + 170 * 4 * 2
    assert estimate_image_tokens(height, width) == tokens


def test_the_summary_names_format_size_bytes_and_tokens() -> None:
    facts = ImageFacts("PNG", "image/png", 1280, 720)
    assert image_summary(facts, 245 * 1024) == "PNG 1280×720, 245 KiB, ~1 105 tokens"
    assert image_summary(ImageFacts("GIF", "image/gif", 16, 16), 405) == "GIF 16×16, 405 bytes, ~255 tokens"
