"""``@path`` mentions: a file or directory named in a prompt joins the user message (docs/prompt.md).

Every front end sends its prompt through :meth:`Session.run_turn <dsh.agent_loop.session.Session.run_turn>`,
which calls :func:`expand_mentions` there: the REPL, piped stdin, ``-p`` and the ACP agent all expand the same
way. What a mention adds goes after the prompt, in the user message, never in the system prompt: the prompt
cache's prefix stays the same (docs/contracts.md, "The prompt cache").

The rule: ``@`` at the start of the prompt or after whitespace, then a path of safe characters (letters, digits,
``_ . / + -``); a trailing ``.`` ends a sentence, not the path, unless the path as typed exists. So an email
(``me@example.com``), ``a@b`` and a quoted or escaped ``@`` (``"@x"``, `` `@x` ``, ``\\@x``) are not mentions,
and the prompt's own text is always sent as typed.

A mentioned file is read as ``AGENTS.md`` is (agent_loop/context.py; docs/configuration.md, "What a hostile
repository can and cannot do"): its real path must stay inside the tree (the git work tree, else the cwd), only
a regular file is opened and never through a link swapped in after the check (agent_loop/safe_open.py), at most
:data:`FILE_CAP_BYTES` of it is sent and all mentions together at most :data:`TOTAL_CAP_BYTES`, a file holding
a NUL byte (binary) is left out, and secrets are masked. Each of those is one line for the user; a mention that
cannot be read is one line too (``@nope.py: no such file in this tree``) and the turn runs with the text as
typed.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from dsh.agent_loop.extension_files import size_text
from dsh.agent_loop.image_input import is_image_file, load_image
from dsh.agent_loop.images import NotAnImage
from dsh.agent_loop.safe_open import NotRegularFile, open_regular_fd
from dsh.llm import Image
from dsh.llm.redact import MASK, Redactor

__all__ = [
    "FILE_CAP_BYTES",
    "MAX_ENTRIES",
    "MAX_MENTIONS",
    "MENTION",
    "TOTAL_CAP_BYTES",
    "Expansion",
    "expand_mentions",
    "fenced",
    "mentions_in",
]

FILE_CAP_BYTES = 64 * 1024  # one mentioned file: the rest is cut, and a line says so
TOTAL_CAP_BYTES = 256 * 1024  # every mention of one prompt together
MAX_ENTRIES = 200  # one mentioned directory's listing
MAX_MENTIONS = 20  # one prompt's mentions; more are named and left out
# `@` at the start or after whitespace, then a path of safe characters (no quote, no backslash, no control).
MENTION = re.compile(r"(?<!\S)@([A-Za-z0-9_./][A-Za-z0-9_./+-]{0,1023})")


class _LeftOut(Exception):
    """Why a mention adds nothing: the end of the line ``@<path>: <why>``."""


@dataclass(slots=True)
class Expansion:
    """The text the model is sent for a prompt, and the lines that tell the user what was cut, masked or left out."""

    text: str
    notices: list[str] = field(default_factory=list)
    images: list[Image] = field(default_factory=list)  # mentioned images, sent after the text


def mentions_in(prompt: str) -> list[str]:
    """The paths a prompt mentions, in order, each once."""
    return list(dict.fromkeys(match.group(1) for match in MENTION.finditer(prompt)))


def expand_mentions(prompt: str, *, cwd: Path, root: Path, redactor: Redactor, keep_images: bool = False) -> Expansion:
    """``prompt`` with a block for each file or directory it mentions after it; the prompt as typed when it has
    none. ``cwd``: what a mention is relative to; ``root``: the tree it must stay inside. A mentioned image is sent
    as an image (agent_loop/image_input.py); ``keep_images``: its bytes go into the session log."""
    if "@" not in prompt:
        return Expansion(prompt)
    expansion = Expansion(prompt)
    blocks: list[str] = []
    budget = TOTAL_CAP_BYTES
    for number, typed in enumerate(mentions_in(prompt)):
        if number == MAX_MENTIONS:
            expansion.notices.append(f"@{typed}: left out: a prompt sends at most {MAX_MENTIONS} mentions")
            break
        try:
            path, real = _resolve(typed, cwd, root)
            if real.is_dir():
                block, used = _directory_block(path, real, expansion.notices, redactor)
            elif is_image_file(real, follow_symlinks=False):
                block, used = _image_block(path, real, expansion, keep_images), 0
            else:
                block, used = _file_block(path, real, min(FILE_CAP_BYTES, budget), expansion.notices, redactor)
        except _LeftOut as why:
            expansion.notices.append(f"@{typed}: {why}")
            continue
        budget -= used
        blocks.append(block)
    if blocks:
        expansion.text = "\n\n".join([prompt, *blocks])
    return expansion


def _resolve(typed: str, cwd: Path, root: Path) -> tuple[str, Path]:
    """How the blocks name a mention (as typed; without a sentence's last ``.`` when only that exists), and its
    real path, which stays inside ``root``. Raises :class:`_LeftOut`."""
    candidates = [typed]
    if typed.endswith(".") and typed.rstrip("."):
        candidates.append(typed.rstrip("."))
    for name in candidates:
        path = cwd / name
        try:
            info = path.lstat()
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raise _LeftOut(f"it cannot be read ({exc.strerror})") from None
        real = Path(os.path.realpath(path))
        if not real.is_relative_to(os.path.realpath(root)):
            raise _LeftOut("it is a symlink to a path outside this tree" if stat.S_ISLNK(info.st_mode)
                           else "it is outside this tree")
        return name, real
    raise _LeftOut("no such file in this tree")


def _file_block(name: str, real: Path, cap: int, notices: list[str], redactor: Redactor) -> tuple[str, int]:
    """The fenced block of a file and the bytes it used of the budget. Raises :class:`_LeftOut`."""
    if cap <= 0:
        raise _LeftOut(f"left out: all mentions together send at most {size_text(TOTAL_CAP_BYTES)}")
    data, size = _read(real, cap)
    if b"\x00" in data:
        raise _LeftOut("left out: it is binary (it holds a NUL byte)")
    cut = size > cap
    text = data[:cap].decode("utf-8", "ignore" if cut else "replace")
    if cut:
        text = text[: text.rfind("\n") + 1] or text  # whole lines, when there is a line end
        text = text[: redactor.safe_length(text)]  # a secret cut in half is left out, not half sent
    masked = redactor(text)
    lines = masked.count("\n") + (0 if not masked or masked.endswith("\n") else 1)
    counted = f"{lines} line" + ("" if lines == 1 else "s")
    what = counted if not cut else f"its first {counted}, cut at {size_text(cap)} of {size_text(size)}"
    if cut:
        notices.append(f"@{name}: cut at {size_text(cap)} of {size_text(size)} (a mention sends at most "
                       f"{size_text(FILE_CAP_BYTES)}, all of a prompt's {size_text(TOTAL_CAP_BYTES)})")
    if masked != text:
        what += ", secrets masked"
        notices.append(f"@{name}: sent with secrets masked ({MASK})")
    return f"@{name} ({what}):\n{fenced(masked)}", len(data[:cap])


def _image_block(name: str, real: Path, expansion: Expansion, keep: bool) -> str:
    """The line that stands for a mentioned image in the text, its image added to ``expansion``. Raises
    :class:`_LeftOut` (not an image after all, over the cap, a decompression bomb)."""
    try:
        image, summary = load_image(real, name, keep=keep, follow_symlinks=False)
    except NotAnImage as why:
        raise _LeftOut(str(why)) from None
    expansion.images.append(image)
    expansion.notices.append(f"@{name}: image, {summary}")
    return f"@{name} (image, {summary}: sent with this message)"


def _read(real: Path, cap: int) -> tuple[bytes, int]:
    """At most ``cap + 1`` bytes of a regular file (never a FIFO or a device, never through a link), and its size."""
    try:
        fd, info = open_regular_fd(real, follow_symlinks=False)
    except NotRegularFile as exc:
        raise _LeftOut(f"left out: it is {exc.kind}, not a regular file") from None
    except OSError as exc:
        raise _LeftOut(f"it cannot be read ({exc.strerror})") from None
    try:
        chunks: list[bytes] = []
        remaining = cap + 1
        while remaining > 0 and (chunk := os.read(fd, min(remaining, 64 * 1024))):
            chunks.append(chunk)
            remaining -= len(chunk)
    except OSError as exc:
        raise _LeftOut(f"it cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data, max(info.st_size, len(data))


def _directory_block(name: str, real: Path, notices: list[str], redactor: Redactor) -> tuple[str, int]:
    """A directory's listing (names sorted, a directory's with ``/``), at most :data:`MAX_ENTRIES` of them."""
    entries: list[str] = []
    more = False
    try:
        with os.scandir(real) as listing:
            for entry in listing:
                if len(entries) == MAX_ENTRIES:
                    more = True
                    break
                entries.append(_shown(entry.name) + ("/" if _is_directory(entry) else ""))
    except OSError as exc:
        raise _LeftOut(f"it cannot be listed ({exc.strerror})") from None
    entries.sort()
    if more:
        notices.append(f"@{name}: listing cut at {MAX_ENTRIES} entries")
        entries.append(f"(more entries: the listing is cut at {MAX_ENTRIES})")
    body = redactor("\n".join(entries))
    count = len(entries) - more
    what = f"directory, {count} {'entry' if count == 1 else 'entries'}" + (", cut" if more else "")
    return f"@{name} ({what}):\n{fenced(body)}", len(body.encode())


def _is_directory(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _shown(name: str) -> str:
    """A file name as the model is sent it: bytes that are not UTF-8 as U+FFFD, control characters escaped."""
    name = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return "".join(char if char.isprintable() else f"\\u{ord(char):04x}" for char in name)


def fenced(text: str) -> str:
    """``text`` in a Markdown fence longer than any run of backticks inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{text}{'' if not text or text.endswith(chr(10)) else chr(10)}{fence}"

