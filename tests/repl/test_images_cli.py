"""Images through ``dsh -p`` (docs/prompt.md, "Images"): real dsh processes against the loopback fault server. The
server receives a vision model's image as a ``data:`` URL after the prompt's text; a model that cannot see gets
nothing, and one line names a model that can; a file that is not an image, or a decompression bomb, is one line;
the session log and a ``--record`` file keep a hash, the bytes only with ``keep_images = true``; a resumed session
sends the placeholder; ``read_file`` on an image sends it after the step's results."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.agent_loop.test_images import png
from tests.reliability.dsh_harness import Home, make_home, run_dsh

SHOT = png(64, 32)
SHOT_URL = "data:image/png;base64," + base64.b64encode(SHOT).decode()
SHOT_SHA = hashlib.sha256(SHOT).hexdigest()
SHOT_LINE = f"@shot.png: image, PNG 64×32, {len(SHOT)} bytes, ~255 tokens"


@pytest.fixture
def server() -> Iterator[FaultServer]:
    srv = FaultServer(default=Behaviour("text", text="a red square"), models=None).start_in_thread()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home = make_home(tmp_path, 'max_retries = 0\ndialect = "deepseek"\n')
    (home.workspace / "shot.png").write_bytes(SHOT)
    return home


def _chats(server: FaultServer) -> list[dict[str, Any]]:
    return [request.json for request in server.requests if request.path.endswith("/chat/completions")]


def _records(home: Home, kind: str) -> list[dict[str, Any]]:
    lines = home.only_session().read_text(encoding="utf-8").splitlines()
    return [record["data"] for record in map(json.loads, lines) if record.get("type") == kind]


def test_a_mentioned_image_goes_to_a_vision_model_after_the_text_and_the_log_keeps_its_hash(
        home: Home, server: FaultServer) -> None:
    run = run_dsh(home, ["-p", "what is in @shot.png"], env={"DEEPSEEK_BASE_URL": server.url})

    assert run.returncode == 0, run.stderr
    assert run.stdout == "a red square\n"
    assert SHOT_LINE in run.stderr.splitlines()
    (chat,) = _chats(server)
    assert chat["model"] == "deepseek-flash"
    assert chat["messages"][-1] == {"role": "user", "content": [
        {"type": "text", "text": f"what is in @shot.png\n\n@shot.png (image, PNG 64×32, {len(SHOT)} bytes, "
                                 "~255 tokens: sent with this message)"},
        {"type": "image_url", "image_url": {"url": SHOT_URL}},
    ]}
    (start,) = _records(home, "turn/start")
    assert start["images"] == [{"name": "shot.png", "media_type": "image/png", "sha256": SHOT_SHA,
                                "size": len(SHOT), "tokens": 255}]
    assert base64.b64encode(SHOT).decode() not in home.only_session().read_text(encoding="utf-8")


def test_an_export_shows_an_image_as_its_placeholder_never_its_bytes(home: Home, server: FaultServer) -> None:
    assert run_dsh(home, ["-p", "what is in", "--image", "shot.png"],
                   env={"DEEPSEEK_BASE_URL": server.url}).returncode == 0
    session = home.only_session().stem

    run = run_dsh(home, ["sessions", "export", session, "--format", "md"])

    assert run.returncode == 0, run.stderr
    exported = run.stdout  # without -o, the export goes to stdout
    assert f"[image shot.png: image/png, {len(SHOT)} bytes, sha256 {SHOT_SHA[:16]}]" in exported
    assert base64.b64encode(SHOT).decode()[:40] not in exported


def test_a_model_that_cannot_see_gets_nothing_and_one_line_names_one_that_can(
        home: Home, server: FaultServer) -> None:
    run = run_dsh(home, ["--model", "deepseek-v4-pro", "-p", "what is this", "--image", "shot.png"],
                  env={"DEEPSEEK_BASE_URL": server.url})

    assert run.returncode == 3
    assert "deepseek-v4-pro does not accept images; use --model deepseek-flash" in run.stderr.splitlines()
    assert _chats(server) == []
    assert run.stdout == ""


def test_a_model_dsh_does_not_know_is_sent_no_image_until_its_table_says_it_sees(
        home: Home, server: FaultServer) -> None:
    run = run_dsh(home, ["--model", "local-vl", "-p", "what is @shot.png"], env={"DEEPSEEK_BASE_URL": server.url})

    assert run.returncode == 3
    assert ('local-vl: dsh does not know whether it accepts images; if it does, set images = true in '
            '[models."local-vl"] (config.toml)') in run.stderr.splitlines()
    assert _chats(server) == []

    home.write_config('max_retries = 0\n[models."local-vl"]\nimages = true\n')
    run = run_dsh(home, ["--model", "local-vl", "-p", "what is @shot.png"], env={"DEEPSEEK_BASE_URL": server.url})
    assert run.returncode == 0, run.stderr
    assert _chats(server)[-1]["messages"][-1]["content"][-1] == {"type": "image_url", "image_url": {"url": SHOT_URL}}


def test_an_image_option_that_is_not_an_image_is_refused_with_one_line_and_nothing_is_sent(
        home: Home, server: FaultServer) -> None:
    (home.workspace / "notes.png").write_text("not a picture\n", encoding="utf-8")

    run = run_dsh(home, ["-p", "look", "--image", "notes.png"], env={"DEEPSEEK_BASE_URL": server.url})

    assert run.returncode == 3
    assert "notes.png: not an image: its bytes are not PNG, JPEG, GIF or WebP" in run.stderr.splitlines()
    assert _chats(server) == []


def test_a_mentioned_decompression_bomb_is_one_line_and_the_turn_runs_with_the_text(
        home: Home, server: FaultServer) -> None:
    (home.workspace / "bomb.png").write_bytes(png(100_000, 100_000, pixels=False))

    run = run_dsh(home, ["-p", "look at @bomb.png"], env={"DEEPSEEK_BASE_URL": server.url})

    assert run.returncode == 0, run.stderr
    assert ("@bomb.png: refused: 100 000×100 000 pixels is a decompression bomb (at most 33 177 600)"
            in run.stderr.splitlines())
    assert _chats(server)[-1]["messages"][-1] == {"role": "user", "content": "look at @bomb.png"}


def test_a_record_file_keeps_the_hash_and_keep_images_keeps_the_bytes(home: Home, server: FaultServer) -> None:
    record = home.root / "trace.jsonl"
    run = run_dsh(home, ["-p", "what is in", "--image", "shot.png", "--record", str(record)],
                  env={"DEEPSEEK_BASE_URL": server.url})
    assert run.returncode == 0, run.stderr
    text = record.read_text(encoding="utf-8")
    assert f"data:image/png;base64,<image omitted: {len(SHOT)} bytes, sha256 {SHOT_SHA}>" in text
    assert base64.b64encode(SHOT).decode() not in text

    home.write_config('max_retries = 0\ndialect = "deepseek"\nkeep_images = true\n')
    for path in home.session_files():
        path.unlink()
    run = run_dsh(home, ["-p", "what is in", "--image", "shot.png", "--record", str(record)],
                  env={"DEEPSEEK_BASE_URL": server.url})
    assert run.returncode == 0, run.stderr
    assert SHOT_URL in record.read_text(encoding="utf-8")
    (start,) = _records(home, "turn/start")
    assert start["images"][0]["data"] == base64.b64encode(SHOT).decode()


def test_a_resumed_session_sends_the_placeholder_of_an_image_it_did_not_keep(
        home: Home, server: FaultServer) -> None:
    assert run_dsh(home, ["-p", "what is in", "--image", "shot.png"],
                   env={"DEEPSEEK_BASE_URL": server.url}).returncode == 0

    run = run_dsh(home, ["--resume", "last", "-p", "and now?"], env={"DEEPSEEK_BASE_URL": server.url})

    assert run.returncode == 0, run.stderr
    first_prompt = _chats(server)[-1]["messages"][1]
    assert first_prompt == {"role": "user", "content": [
        {"type": "text", "text": "what is in"},
        {"type": "text", "text": f"[image shot.png: image/png, {len(SHOT)} bytes, sha256 {SHOT_SHA[:16]}]"},
    ]}


def test_read_file_on_an_image_sends_it_after_the_step_s_results(home: Home, server: FaultServer) -> None:
    server.push(Behaviour("tool_call", name="read_file", arguments='{"path": "shot.png"}'), "text")

    run = run_dsh(home, ["-p", "look at the screenshot"], env={"DEEPSEEK_BASE_URL": server.url})

    assert run.returncode == 0, run.stderr
    messages = _chats(server)[-1]["messages"]
    tool, seen = messages[-2:]
    assert tool["role"] == "tool"
    assert tool["content"] == f"shot.png: image, PNG 64×32, {len(SHOT)} bytes, ~255 tokens; sent to you with this " \
                              "step's results"
    assert seen == {"role": "user", "content": [{"type": "text", "text": "The image read_file read: shot.png"},
                                                {"type": "image_url", "image_url": {"url": SHOT_URL}}]}
    (result,) = _records(home, "tool/result")
    assert result["images"][0]["sha256"] == SHOT_SHA and "data" not in result["images"][0]


def test_read_file_on_an_image_for_a_model_that_cannot_see_tells_the_model_why(
        home: Home, server: FaultServer) -> None:
    server.push(Behaviour("tool_call", name="read_file", arguments='{"path": "shot.png"}'), "text")

    run = run_dsh(home, ["--model", "deepseek-v4-pro", "-p", "look"], env={"DEEPSEEK_BASE_URL": server.url})

    assert run.returncode == 0, run.stderr
    tool = _chats(server)[-1]["messages"][-1]
    assert tool["content"] == ("Error: shot.png is an image, not sent: deepseek-v4-pro does not accept images; "
                               "use --model deepseek-flash")
