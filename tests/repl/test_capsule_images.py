"""A failure capsule of a turn that sent an image holds the image's size and hash, never its bytes
(docs/reporting.md, docs/prompt.md "Images"): the ring keeps a request raw until the report masks it, and the
image is replaced before it is kept. Real ``dsh -p --image … --report`` against the loopback fault server."""

from __future__ import annotations

import base64
import json

from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.reliability.dsh_harness import Home, run_dsh
from tests.repl.test_images_cli import SHOT, SHOT_SHA, home, server

__all__ = ["home", "server"]  # the fixtures, used by name


def test_a_capsule_of_a_turn_with_an_image_holds_its_hash_never_its_bytes(home: Home, server: FaultServer) -> None:
    capsule = home.root / "capsule.jsonl"
    server.push(Behaviour("http_500"))
    run = run_dsh(home, ["-p", "what is in", "--image", "shot.png", "--report", str(capsule)],
                  env={"DEEPSEEK_BASE_URL": server.url})
    assert run.returncode == 1, run.stderr
    assert run.stderr.splitlines()[-1] == f"dsh: report written to {capsule}"
    text = capsule.read_text(encoding="utf-8")
    assert base64.b64encode(SHOT).decode() not in text
    [request] = [json.loads(line) for line in text.splitlines() if json.loads(line)["type"] == "request"]
    assert f"data:image/png;base64,<image omitted: {len(SHOT)} bytes, sha256 {SHOT_SHA}>" in request["body"]
