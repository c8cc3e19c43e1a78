"""A stand-in for ``dsh serve --stdio`` whose one answer is the ``initialize`` params it was sent (as JSON, ``cwd``
left out): what the dsh provider hands a child is then the run's output (tests/agent_loop/subagent/
test_dsh_sdk_request_gate.py). Newline-delimited JSON-RPC 2.0 on stdin/stdout, blocking reads: small on purpose.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _send(frame: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **frame}) + "\n")
    sys.stdout.flush()


def _event(kind: str, data: dict[str, Any]) -> None:
    _send({"method": "session/event", "params": {"event": {"type": kind, "data": data}}})


def main() -> None:
    sent: dict[str, Any] = {}
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id, params = message.get("method"), message.get("id"), message.get("params")
        if method == "initialize":
            sent = {key: value for key, value in params.items() if key != "cwd"}
            _send({"id": request_id, "result": {"protocolVersion": 1, "serverInfo": {"name": "echo", "version": "0"},
                                                "session": {"id": "echo"}}})
        elif method == "session/prompt":
            text = json.dumps(sent, sort_keys=True)
            _event("turn/start", {"turn": 1, "prompt": params.get("prompt", "")})
            _event("step/start", {"turn": 1, "step": 1})
            _event("text/delta", {"text": text})
            _event("assistant/message", {"turn": 1, "step": 1, "content": text, "interrupted": False})
            _event("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
            _send({"id": request_id, "result": {"reason": {"kind": "completed"}}})
        elif method == "shutdown":
            _send({"id": request_id, "result": {}})
            return


if __name__ == "__main__":
    main()
