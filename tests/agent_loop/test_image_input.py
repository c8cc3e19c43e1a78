"""Which model is sent images and what stands for one that is not (agent_loop/image_input.py), and an image's bytes
in the session log only with keep_images (agent_loop/events.py)."""

from __future__ import annotations

import base64
from pathlib import Path

from dsh.agent_loop import events as ev
from dsh.agent_loop.image_input import ImageRules, load_image, without_images
from dsh.llm import Message
from dsh.llm.models import ModelSettings
from tests.agent_loop.test_images import png


def test_the_model_table_says_which_model_sees_and_the_line_names_one_that_does() -> None:
    rules = ImageRules()
    assert rules.accepts("deepseek-flash") is True
    assert rules.refusal("deepseek-flash") is None
    assert rules.refusal("deepseek-v4-pro") == "deepseek-v4-pro does not accept images; use --model deepseek-flash"
    assert rules.accepts("some-local-model") is None
    assert rules.refusal("some-local-model") == (
        'some-local-model: dsh does not know whether it accepts images; if it does, set images = true in '
        '[models."some-local-model"] (config.toml)')


def test_another_endpoint_is_never_told_to_use_a_deepseek_model() -> None:
    openai = ImageRules(dialect="openai")
    assert openai.refusal("deepseek-v4-pro") == (
        'deepseek-v4-pro does not accept images; set images = true in the [models."NAME"] table of one that does')
    tables = {"text-only": ModelSettings(images=False), "vl": ModelSettings(images=True)}
    assert ImageRules(tables, "openai").refusal("text-only") == "text-only does not accept images; use --model vl"
    assert ImageRules(tables, "openai").accepts("vl") is True


def test_a_model_that_cannot_see_reads_each_image_s_placeholder(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(png(8, 8))
    image, _ = load_image(tmp_path / "a.png", "a.png", keep=False)
    messages = [Message("user", "look", images=(image,)), Message("assistant", "ok")]

    sent = without_images(messages)

    assert sent[0] == Message("user", f"look\n{image.placeholder}")
    assert sent[1] is messages[1]
    assert image.placeholder == f"[image a.png: image/png, {image.size} bytes, sha256 {image.sha256[:16]}]"


def test_an_image_s_bytes_are_logged_only_when_kept(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(data := png(8, 8))
    for keep in (False, True):
        image, _ = load_image(tmp_path / "a.png", "a.png", keep=keep)
        wire = ev.to_wire(ev.TurnStart(1, "look", images=(image,)))
        logged = wire["data"]["images"][0]
        assert ("data" in logged) is keep
        back = ev.from_wire(wire)
        assert isinstance(back, ev.TurnStart) and back.images is not None
        assert back.images[0].data == (data if keep else None)
        if keep:
            assert logged["data"] == base64.b64encode(data).decode()
