"""A tiny ACP agent written against the wire format, without the SDK (starts in ~30 ms instead of ~1 s).

For the reliability suite: the JSON-RPC fuzz of the ACP reader (garbage frames, then an exit) and the
50-concurrent-runs load test, where 50 SDK agents would cost a minute of CPU. The frames it writes are the
ones the SDK fixture (repl/demo/acp_agent.py) writes; the parent side is the real provider and SDK client.

Scripted by ``RAW_ACP`` (JSON)::

    {"answer": 3,              # requests answered properly (initialize, session/new, session/prompt)
     "garbage": "/path",       # on the next request: write this file's bytes to stdout ...
     "exit_code": 3,           # ... then exit with this code (or "signal": "SIGKILL")
     "text": "answer text",    # the prompt's answer, in two agent_message_chunk updates
     "stop": "end_turn",       # the prompt's stop reason
     "stderr": "text"}         # written to stderr at start-up
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

_script = json.loads(os.environ.get("RAW_ACP") or "{}")


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def _send(frame: dict[str, object]) -> None:
    _write_all((json.dumps({"jsonrpc": "2.0", **frame}) + "\n").encode())


def _leave() -> None:
    sig = _script.get("signal")
    if sig:
        os.kill(os.getpid(), getattr(signal, sig))
        time.sleep(5)  # the signal ends the process: it must not exit on its own first
    os._exit(int(_script.get("exit_code", 0)))


def _answer(request_id: object, method: str, params: dict[str, object]) -> None:
    if method == "initialize":
        _send({"id": request_id, "result": {"protocolVersion": 1, "agentInfo": {"name": "raw", "version": "0"}}})
    elif method == "session/new":
        _send({"id": request_id, "result": {"sessionId": f"raw-{os.getpid()}"}})
    elif method == "session/prompt":
        text = str(_script.get("text", "done"))
        for part in (text[: len(text) // 2], text[len(text) // 2 :]):
            if part:
                update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": part}}
                _send({"method": "session/update", "params": {"sessionId": params.get("sessionId"), "update": update}})
        _send({"id": request_id, "result": {"stopReason": _script.get("stop", "end_turn")}})
    else:
        _send({"id": request_id, "error": {"code": -32601, "message": "Method not found"}})


def main() -> None:
    if _script.get("stderr"):
        os.write(2, (str(_script["stderr"]) + "\n").encode())
    answered = 0
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or "method" not in message or "id" not in message:
            continue  # notifications (session/cancel) need no answer
        if answered >= int(_script.get("answer", 99)):
            if _script.get("garbage"):
                with open(str(_script["garbage"]), "rb") as handle:
                    _write_all(handle.read())
            _leave()
        _answer(message["id"], str(message["method"]), message.get("params") or {})
        answered += 1
    _leave()  # stdin closed: the parent's teardown


if __name__ == "__main__":
    main()
