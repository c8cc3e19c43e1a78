"""What a paste at the prompt becomes (repl/pasted_images.py): one image file's path, however the terminal spelled
it, is ``[image N: NAME]`` and is sent; anything else stays text; an image whose words the user deleted is not sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.repl.pasted_images import PastedImages, pasted_path
from tests.agent_loop.test_images import png


@pytest.mark.parametrize(("pasted", "spelled"), [
    ("/shots/a b.png", "/shots/a b.png"),
    ("'/shots/a b.png'", "/shots/a b.png"),
    ('"/shots/a b.png"', "/shots/a b.png"),
    ("/shots/a\\ b.png", "/shots/a b.png"),
    ("file:///shots/a%20b.png", "/shots/a b.png"),
    ("file://localhost/shots/a%20b.png", "/shots/a b.png"),
    ("  rel/a.png \n", "/cwd/rel/a.png"),
])
def test_a_path_is_read_as_terminals_paste_it(pasted: str, spelled: str) -> None:
    assert pasted_path(pasted, Path("/cwd")) == Path(spelled)


@pytest.mark.parametrize("pasted", ["", "a.png\nb.png", "file://example.com/a.png", "x" * 5000, "a\x00.png"])
def test_what_cannot_be_one_local_path_is_none(pasted: str) -> None:
    assert pasted_path(pasted, Path("/cwd")) is None


def test_an_image_path_becomes_its_words_and_other_pastes_stay_text(tmp_path: Path) -> None:
    (tmp_path / "shot.png").write_bytes(png(8, 8))
    (tmp_path / "notes.png").write_text("text\n", encoding="utf-8")
    (tmp_path / "second.png").write_bytes(png(8, 8))
    pasted = PastedImages()

    assert pasted.paste("shot.png", tmp_path) == "[image 1: shot.png]"
    assert pasted.paste("notes.png", tmp_path) == "notes.png"  # not an image: text as pasted
    assert pasted.paste("hello world", tmp_path) == "hello world"
    assert pasted.paste(str(tmp_path / "second.png"), tmp_path) == "[image 2: second.png]"
    # The user deleted the first one's words: only the second is sent, then both are forgotten.
    assert pasted.take("look at [image 2: second.png]") == [tmp_path / "second.png"]
    assert pasted.take("[image 2: second.png]") == []
    assert pasted.paste("shot.png", tmp_path) == "[image 1: shot.png]"  # numbered from 1 again
