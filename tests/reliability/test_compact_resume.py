"""``/compact`` is durable: SIGKILL right after it, and ``--resume`` continues from the summary.

A real piped ``dsh`` talks to the fault server: one turn, then ``/compact``; as soon as the
``[compacted]`` line is printed the process is SIGKILLed (stdin still open, nothing closed cleanly).
``dsh --resume last -p`` then sends the next request, which the server recorded: its messages are the
system prompt, the summary and the new prompt — not the turn that was compacted away.
"""

from __future__ import annotations

import subprocess
import time

from dsh_harness import (
    LineReader,
    assert_well_formed,
    config_text,
    dsh_command,
    dsh_env,
    make_home,
    read_log,
    run_dsh,
    stop_process,
)

from dsh.agent_loop.compact import SUMMARY_HEADER
from dsh.llm.loopback.fault_server import Behaviour, FaultServer
from tests.repl.test_usage_and_context import sent_usage

SUMMARY = "The user greeted the assistant; nothing else happened yet."


def test_compact_then_kill_9_then_resume_continues_from_the_summary(tmp_path) -> None:
    server = FaultServer(script=["text", Behaviour("text", text=SUMMARY), "text"]).start_in_thread()
    try:
        home = make_home(tmp_path, config_text(extra=f'base_url = "{server.url}"\n'))
        process = subprocess.Popen(dsh_command([]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=dsh_env(home), cwd=home.workspace)
        try:
            assert process.stdin is not None
            process.stdin.write(b"hello\n/compact\n")
            process.stdin.flush()
            reader = LineReader(process)
            deadline = time.monotonic() + 60
            while "[compacted]" not in reader.text and time.monotonic() < deadline:
                assert reader.pump(0.2), f"dsh exited early: {reader.text!r}"
            while not reader.text.endswith("\n"):  # the whole line, no more
                reader.pump(0.2)
        finally:
            stop_process(process)  # SIGKILL
        assert process.returncode == -9
        tokens = sent_usage(SUMMARY)["completion_tokens"]
        assert reader.text.splitlines()[-1] == f"[compacted] 2 messages replaced by a summary of {tokens} tokens"

        run = run_dsh(home, ["--resume", "last", "-p", "what next?"], label="resume-after-compact")
        assert run.returncode == 0, run.stderr
        sent = server.requests[-1].json["messages"]
        assert [m["role"] for m in sent] == ["system", "user", "user"]
        assert sent[1]["content"] == SUMMARY_HEADER + SUMMARY
        assert sent[2]["content"] == "what next?"

        _, records = read_log(home.only_session())
        assert [r["type"] for r in records] == [
            "turn/start", "step/start", "assistant/message", "turn/end", "context/compact",
            "turn/start", "step/start", "assistant/message", "turn/end",
        ]
        assert_well_formed(records)
    finally:
        server.stop()
