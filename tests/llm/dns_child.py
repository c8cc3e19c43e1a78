"""Run inside a loopback-only namespace (tests/real_parts.py): what plain httpx and the client make of a
name that does not exist. Prints one JSON object; the test asserts on it."""

from __future__ import annotations

import contextlib
import json
import sys

import anyio
import httpx

from dsh.llm import ChatRequest, DeepSeekClient, LlmError, Message, error_chain

URL = sys.argv[1]


async def main() -> None:
    facts: dict[str, object] = {}
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, connect=2.0)) as http:
        try:
            await http.post(URL + "/chat/completions", json={"model": "m", "messages": []})
        except httpx.HTTPError as exc:
            facts["raw_type"] = type(exc).__name__
            facts["raw_chain"] = error_chain(exc)
    client = DeepSeekClient(base_url=URL, api_key="sk-dns-child-key-0000", connect_timeout=5.0)
    try:
        request = ChatRequest(model="m", messages=[Message("user", "hi")])
        async with contextlib.aclosing(client.stream(request)) as events:
            async for _ in events:
                pass
    except LlmError as error:
        facts.update(code=str(error.code), message=error.message, chain=error_chain(error),
                     detail=str(error.detail), retry_limit=error.retry_limit)
    finally:
        await client.aclose()
    print(json.dumps(facts))


anyio.run(main)
