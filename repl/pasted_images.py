"""Image paths pasted at the prompt (docs/prompt.md, "Images"): a terminal pastes a dragged-in screenshot as its
path, quoted or with its spaces escaped, or as a ``file://`` URL. Such a paste of one path to an image file
becomes ``[image 1: shot.png]`` in the prompt, and the image is sent with it (the user named the file, so it may be
outside the tree; it is checked as every image is: agent_loop/image_input.py). Any other paste is text."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from dsh.agent_loop.image_input import is_image_file

__all__ = ["PastedImages", "pasted_path"]

_MAX_PASTED_PATH = 4096  # a longer paste is text, not a path
_ESCAPED = re.compile(r"\\(.)")


def pasted_path(text: str, cwd: Path) -> Path | None:
    """The one path ``text`` spells, as a terminal pastes it (``'/a b/c.png'``, ``/a\\ b/c.png``,
    ``file:///a%20b/c.png``), relative to ``cwd``; None for anything else."""
    text = text.strip()
    if not text or len(text) > _MAX_PASTED_PATH or "\n" in text or "\x00" in text:
        return None
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    elif text.startswith("file://"):
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            return None
        text = unquote(parts.path)
    else:
        text = _ESCAPED.sub(r"\1", text)
    return cwd / os.path.expanduser(text)


class PastedImages:
    """The images pasted at the prompt since the last prompt was sent, each by the words that stand for it."""

    def __init__(self) -> None:
        self._paths: dict[str, Path] = {}
        self._count = 0

    def paste(self, text: str, cwd: Path) -> str:
        """What a paste puts into the prompt: ``[image N: NAME]`` for one image file's path, else the text."""
        path = pasted_path(text, cwd)
        if path is None or not is_image_file(path):
            return text
        self._count += 1
        words = f"[image {self._count}: {path.name}]"
        self._paths[words] = path
        return words

    def take(self, prompt: str) -> list[Path]:
        """The images whose words are still in ``prompt`` (one the user deleted is not sent); all are forgotten."""
        found = [path for words, path in self._paths.items() if words in prompt]
        self._paths.clear()
        self._count = 0
        return found
