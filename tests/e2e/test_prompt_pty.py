"""Working at the prompt in a real terminal (docs/prompt.md): ``@`` completing a path with its size in tokens and
the file joining the message; Ctrl-G and Ctrl-X Ctrl-E opening the prompt in a scripted ``$EDITOR``; vi key
bindings from the config and ``/vim`` switching back; a pasted image path sending the image."""

from __future__ import annotations

import base64
import subprocess
import time
from pathlib import Path

from test_pty import KEY, home, spawn  # noqa: F401  (fixtures)

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.agent_loop.test_images import png

APP = "x = 1\n" * 70  # 420 bytes: ≈ 105 tokens at four a token
ESCAPE_TIMEOUT = 0.8  # prompt_toolkit reads a lone Esc as Esc only after a pause (else Alt with the next key)


def repository(root: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text(APP, encoding="utf-8")
    (root / "README.md").write_text("hello\n", encoding="utf-8")
    subprocess.run(["git", "add", "README.md"], cwd=root, check=True)  # src/app.py stays untracked: listed too
    return root


def _user_prompts(server: FaultServer) -> list[str]:
    return [[m["content"] for m in r.json["messages"] if m["role"] == "user"][-1] for r in server.requests]


def test_at_completes_a_path_with_its_tokens_and_the_file_joins_the_message(home: Path, spawn) -> None:  # noqa: F811
    work = repository(home / "work")
    with FaultServer(default=Behaviour("text", text="done\n"), models=None) as server:
        dsh = spawn(cwd=work, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.child.send("explain @sapp")
        dsh.wait_screen("src/app.py")
        dsh.wait_screen("≈ 105 tokens")  # the menu: the path and its size
        dsh.child.send("\t")
        dsh.wait_screen("> explain @src/app.py")
        dsh.child.send("\r")
        dsh.expect_exact("done\r\n")
        dsh.prompt()
        dsh.send("and @nope.py")
        dsh.expect_exact("@nope.py: no such file in this tree")
        dsh.expect_exact("done\r\n")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    first, second = _user_prompts(server)
    assert first == f"explain @src/app.py\n\n@src/app.py (70 lines):\n```\n{APP}```"
    assert second == "and @nope.py"


def test_ctrl_g_and_ctrl_x_ctrl_e_open_the_prompt_in_the_editor(home: Path, spawn) -> None:  # noqa: F811
    editor = home / "editor.sh"
    # The scripted editor: what was in the prompt, then a line of its own, saved back.
    editor.write_text('#!/bin/sh\nprintf "%s written by the editor" "$(cat "$1")" > "$1.new" && mv "$1.new" "$1"\n',
                      encoding="utf-8")
    editor.chmod(0o755)
    with FaultServer(default=Behaviour("text", text="done\n"), models=None) as server:
        dsh = spawn(cwd=home, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url, VISUAL=str(editor),
                    EDITOR="/bin/false")
        dsh.prompt()
        dsh.child.send("draft")
        dsh.child.send("\x07")  # Ctrl-G
        dsh.wait_screen("> draft written by the editor")
        dsh.child.send("\r")
        dsh.expect_exact("done\r\n")
        dsh.prompt()
        dsh.child.send("second")
        dsh.child.send("\x18\x05")  # Ctrl-X Ctrl-E
        dsh.wait_screen("> second written by the editor")
        dsh.child.send("\r")
        dsh.expect_exact("done\r\n")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    assert _user_prompts(server) == ["draft written by the editor", "second written by the editor"]


def test_vi_mode_from_the_config_and_vim_switching_back(home: Path, spawn) -> None:  # noqa: F811
    (home / "config" / "dsh").mkdir(parents=True)
    (home / "config" / "dsh" / "config.toml").write_text("vi_mode = true\n", encoding="utf-8")
    with FaultServer(default=Behaviour("text", text="done\n"), models=None) as server:
        dsh = spawn(cwd=home, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.child.send("hello")
        dsh.child.send("\x1b")
        time.sleep(ESCAPE_TIMEOUT)
        dsh.child.send("0")  # normal mode: to the start of the line
        dsh.child.send("isay ")  # insert there
        dsh.wait_screen("> say hello")
        dsh.child.send("\r")
        dsh.expect_exact("done\r\n")
        dsh.prompt()
        dsh.send("/vim")
        dsh.expect_exact("emacs key bindings (/vim switches to vi)")
        dsh.prompt()
        dsh.child.send("world")
        dsh.child.send("\x01")  # Ctrl-A: emacs's start of line
        dsh.child.send("hi ")
        dsh.wait_screen("> hi world")
        dsh.child.send("\r")
        dsh.expect_exact("done\r\n")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    assert _user_prompts(server) == ["say hello", "hi world"]


def _paste(text: str) -> str:
    """``text`` as a terminal sends a paste in bracketed-paste mode (prompt_toolkit turns it on)."""
    return f"\x1b[200~{text}\x1b[201~"


def test_a_pasted_image_path_is_sent_as_the_image_and_other_pastes_stay_text(home: Path, spawn) -> None:  # noqa: F811
    shots = home / "My Screenshots"  # outside the working tree, with a space: as a terminal pastes a dragged file
    shots.mkdir()
    shot = png(40, 20)
    (shots / "shot 1.png").write_bytes(shot)
    work = home / "work"
    work.mkdir()
    with FaultServer(default=Behaviour("text", text="done\n"), models=None) as server:
        dsh = spawn(cwd=work, DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=server.url)
        dsh.prompt()
        dsh.child.send("what is ")
        dsh.child.send(_paste(f"'{shots}/shot 1.png' "))
        dsh.wait_screen("> what is [image 1: shot 1.png]")
        dsh.child.send("\r")
        dsh.expect_exact("shot 1.png: image, PNG 40×20")
        dsh.expect_exact("done\r\n")
        dsh.prompt()
        dsh.child.send("see ")
        dsh.child.send(_paste(f"{shots}/missing.png"))  # no such image: the paste is text
        dsh.wait_screen(f"> see {shots}/missing.png")
        dsh.child.send("\r")
        dsh.expect_exact("done\r\n")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
    first, second = (request.json["messages"][-1]["content"] for request in server.requests)
    assert first == [{"type": "text", "text": "what is [image 1: shot 1.png]"},
                     {"type": "image_url", "image_url": {"url": "data:image/png;base64," +
                                                         base64.b64encode(shot).decode()}}]
    assert second == f"see {shots}/missing.png"
