"""``/doctor`` in the real REPL, in a pseudo-terminal: each step's line as it ends, then the prompt again."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_pty import KEY, home, spawn  # noqa: F401 (fixtures)

from dsh.llm.loopback.fault_server import closed_port

pytestmark = pytest.mark.timeout(60)


def test_slash_doctor_in_the_demo_passes_every_step_and_sees_the_terminal(spawn) -> None:  # noqa: F811
    dsh = spawn("--demo")
    dsh.prompt()
    dsh.send("/doctor")
    dsh.expect(r"✓ configuration: base_url http://127\.0\.0\.1:\d+ \(the demo scenario\); model deepseek-flash "
               r"\(default\); key not needed \(demo\)\r\n")
    dsh.expect_exact("– TLS: http:// endpoint: no TLS\r\n")
    dsh.expect(r"✓ stream: headers in \d+\.\d ms; first token in \d+\.\d ms; 0 keep-alives; \[DONE\]")
    dsh.expect(r"✓ environment: [^\r]*; TERM=xterm, 200x40, colour; state ")
    dsh.expect_exact("doctor: every step passed\r\n")
    dsh.prompt()
    dsh.child.sendeof()
    assert dsh.wait_exit() == 0


def test_slash_doctor_against_a_refused_endpoint_stops_at_tcp_with_the_fix(home: Path, spawn) -> None:  # noqa: F811
    with closed_port() as port:
        dsh = spawn(DEEPSEEK_API_KEY=KEY, DEEPSEEK_BASE_URL=f"http://127.0.0.1:{port}")
        dsh.prompt()
        dsh.send("/doctor")
        for line in (
            f"✗ TCP: [TRANSPORT] request to the endpoint at http://127.0.0.1:{port} failed: All connection attempts "
            f"failed: [Errno 111] Connect call failed ('127.0.0.1', {port})",
            f"  fix: nothing is listening at 127.0.0.1:{port} — check DEEPSEEK_BASE_URL (environment)",
            "– TLS: skipped (an earlier step failed)",
        ):
            dsh.expect_exact(line + "\r\n")
        dsh.expect_exact("doctor: failed at TCP\r\n")
        dsh.prompt()
        dsh.child.sendeof()
        assert dsh.wait_exit() == 0
