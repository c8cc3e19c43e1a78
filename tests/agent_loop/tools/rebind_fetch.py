"""Run inside a namespace with a loopback DNS server (tests/loopback_dns.py): one web_fetch of
``http://HOST:PORT/page`` (HOST the first argument) against a real loopback site, the user saying yes; prints
what came back and what the site saw as JSON. Used by tests/agent_loop/tools/test_web_pinning.py."""

from __future__ import annotations

import json
import sys

import anyio

from tests.agent_loop.tools.test_web_fetch import Answers, _fetch, _serving, _settings


async def main(host: str) -> None:
    with _serving() as site:
        answers = Answers("yes")
        out = await _fetch(f"http://{host}:{site.server_address[1]}/page", _settings(allow=()), answers)
        json.dump({"text": out.text, "asked": [str(a) for a in answers.asked],
                   "seen": [h[":path"] for h in site.seen]}, sys.stdout)  # type: ignore[attr-defined]


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
