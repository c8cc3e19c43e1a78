"""Images a prompt or a tool sends the model: which model may see them, and an image file made into one
(docs/prompt.md, "Images").

An image comes from an ``@shot.png`` mention (agent_loop/mentions.py), ``dsh -p --image FILE``, a pasted image
path at the REPL, or ``read_file`` on an image (agent_loop/tools/files.py). Each is checked by
agent_loop/images.py first (magic bytes, size cap, pixel count), and each is sent only to a model that accepts
images: the model table says which (llm/models.py; ``images = true`` in a ``[models."NAME"]`` table says it for
another model). For any other model one line says so and names a configured model that can see, and nothing is
sent. The session log keeps an image's facts and hash, its bytes only with ``keep_images = true``; a resumed
conversation without them sends each image's placeholder text instead.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from dsh.agent_loop.images import (
    ImageFacts,
    NotAnImage,
    checked_image,
    estimate_image_tokens,
    image_format,
    image_summary,
    read_image,
)
from dsh.agent_loop.safe_open import open_regular_fd
from dsh.llm import Image, Message
from dsh.llm.endpoint import DIALECTS
from dsh.llm.models import MODELS, ModelSettings, model_info

__all__ = ["ImageRules", "image_from_bytes", "is_image_file", "load_image", "prompt_images", "without_images"]


@dataclass(frozen=True, slots=True)
class ImageRules:
    """What decides whether an image is sent: the ``[models]`` tables, the endpoint's dialect (DeepSeek's own
    models are suggested to a DeepSeek endpoint only), and ``keep_images``."""

    models: Mapping[str, ModelSettings] = field(default_factory=dict)
    dialect: str = DIALECTS[0]
    keep: bool = False

    def accepts(self, model: str) -> bool | None:
        """Whether ``model`` takes image input; None when dsh does not know the model."""
        info = model_info(model, self.models)
        if info is None:
            return None
        table = self.models.get(model)
        known = model in MODELS or (table is not None and table.images is not None)
        return info.images if known else None

    def refusal(self, model: str) -> str | None:
        """The line that says ``model`` cannot be sent images, and which configured model can; None when it can."""
        accepts = self.accepts(model)
        if accepts:
            return None
        if accepts is None:
            return (f'{model}: dsh does not know whether it accepts images; if it does, set images = true in '
                    f'[models."{model}"] (config.toml)')
        seeing = [name for name, table in self.models.items() if table.images]
        if self.dialect == DIALECTS[0]:
            seeing += [name for name, info in MODELS.items() if info.images and info.served_by is None]
        if seeing:
            return f"{model} does not accept images; use --model {seeing[0]}"
        return f'{model} does not accept images; set images = true in the [models."NAME"] table of one that does'


def is_image_file(path: Path, *, follow_symlinks: bool = True) -> bool:
    """Whether a file's first bytes say it is an image (never waiting on a FIFO; what cannot be opened is not)."""
    try:
        fd, _ = open_regular_fd(path, follow_symlinks=follow_symlinks)
    except OSError:
        return False  # the file's own read says why
    try:
        return image_format(os.read(fd, 16)) is not None
    except OSError:
        return False
    finally:
        os.close(fd)


def load_image(path: Path, name: str, *, keep: bool, follow_symlinks: bool = True) -> tuple[Image, str]:
    """The image in ``path``, named ``name``, and what its line says of it (``PNG 1280×720, 245 KiB, ~1 105
    tokens``). Raises :class:`~dsh.agent_loop.images.NotAnImage` with the reason."""
    data, facts = read_image(path, follow_symlinks=follow_symlinks)
    return _image(data, facts, name, keep)


def image_from_bytes(data: bytes, name: str, *, keep: bool) -> tuple[Image, str]:
    """:func:`load_image` of an image given as bytes (an editor's image block, repl/acp_session.py)."""
    return _image(data, checked_image(data), name, keep)


def _image(data: bytes, facts: ImageFacts, name: str, keep: bool) -> tuple[Image, str]:
    image = Image(name, facts.media_type, hashlib.sha256(data).hexdigest(), len(data),
                  estimate_image_tokens(facts.width, facts.height), data, keep=keep)
    return image, image_summary(facts, len(data))


def prompt_images(paths: Sequence[Path | Image], mentioned: Sequence[Image], rules: ImageRules, model: str,
                  lines: list[str]) -> tuple[tuple[Image, ...], str | None]:
    """The images a prompt sends: each file of ``paths`` (``--image``, a pasted path: the user named it, so it may
    be anywhere), each one's line added to ``lines`` (an :class:`Image` there was checked and told of by the front
    end that was given it), then the ``mentioned`` ones; and the refusal that keeps the prompt from being sent at
    all: a named file that is not an image, or a model that cannot see."""
    images: list[Image] = []
    for path in paths:
        if isinstance(path, Image):
            images.append(path)
            continue
        try:
            image, summary = load_image(path, path.name, keep=rules.keep)
        except NotAnImage as why:
            return (), f"{path.name}: {why}"
        lines.append(f"{path.name}: image, {summary}")
        images.append(image)
    images += mentioned
    refusal = rules.refusal(model) if images else None
    return (tuple(images), None) if refusal is None else ((), refusal)


def without_images(messages: Iterable[Message]) -> list[Message]:
    """``messages`` for a model that cannot see: each image is its placeholder text (a session that switched to
    such a model with images in its conversation goes on, and the model reads what was there)."""
    return [replace(message, content="\n".join([message.content, *(image.placeholder for image in message.images)]),
                    images=()) if message.images else message for message in messages]
