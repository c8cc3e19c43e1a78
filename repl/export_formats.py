"""An exported conversation as Markdown, JSON or one self-contained HTML page (docs/prompt.md, "Export").

Every text reaching here is already masked and inert (:mod:`dsh.repl.export`). Markdown puts what the model
and the tools wrote in fences longer than any backtick run inside them; the HTML escapes every text and
carries a Content-Security-Policy that allows no script and no outside resource, only its own inline style.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from dsh.llm._version import __version__
from dsh.repl.export import Conversation, Item, ItemKind, Turn

__all__ = ["EXPORT_VERSION", "render"]

EXPORT_VERSION = 1  # the JSON object's "version"
CSP = "default-src 'none'; style-src 'unsafe-inline'"
_BACKTICKS = re.compile(r"`+")


def render(conversation: Conversation, fmt: str) -> str:
    """The conversation in ``fmt`` (``md``, ``json`` or ``html``)."""
    if fmt == "json":
        return json.dumps(to_json(conversation), ensure_ascii=False, indent=1) + "\n"
    if fmt == "html":
        return to_html(conversation)
    return to_markdown(conversation)


def _reasoning_note(conversation: Conversation) -> str | None:
    if conversation.reasoning or not conversation.reasoning_omitted:
        return None
    return f"reasoning omitted ({conversation.reasoning_omitted:,} characters; --reasoning keeps it)"


def _heading(turn: Turn) -> str:
    return f"Turn {turn.number}" + (" (background job notices)" if turn.notice else "")


# --- Markdown -------------------------------------------------------------------------------------


def _fence(text: str, info: str = "") -> str:
    """``text`` in a code fence no backtick run inside it can close."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{info}\n{text}\n{ticks}\n"


def _quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.split("\n")) + "\n"


def _md_item(item: Item) -> str:
    if item.kind is ItemKind.ANSWER:
        return item.text.rstrip("\n") + "\n"
    if item.kind is ItemKind.REASONING:
        return "*Reasoning:*\n\n" + _quote(item.text.rstrip("\n"))
    if item.kind is ItemKind.TOOL_CALL:
        return f"**Tool call** `{item.name.replace('`', '')}`\n\n" + _fence(item.text, "json")
    return _fence(item.text, "text")  # a tool result or a note: the REPL's own lines


def to_markdown(conversation: Conversation) -> str:
    note = _reasoning_note(conversation)
    meta = [f"project: {conversation.project}", f"created: {conversation.created}",
            f"exported by dsh {__version__}; secrets masked", *([note] if note else []), *conversation.notes]
    parts = [f"# dsh session {conversation.id}\n", "".join(f"- {line}\n" for line in meta)]
    for turn in conversation.turns:
        parts.append(f"## {_heading(turn)}\n")
        parts.append(_quote(turn.prompt) if turn.prompt else "> (no prompt)\n")
        parts += [_md_item(item) for item in turn.items]
        if turn.end:
            parts.append(_fence("\n".join(turn.end), "text"))
        if turn.usage:
            parts.append(f"*{turn.usage}*\n")
    return "\n".join(parts)


# --- JSON -----------------------------------------------------------------------------------------


def _json_item(item: Item) -> dict[str, Any]:
    if item.kind is ItemKind.TOOL_CALL:
        return {"type": "tool_call", "name": item.name, "arguments": item.text}
    if item.kind is ItemKind.TOOL_RESULT:
        return {"type": "tool_result", "name": item.name, "error": item.error, "shown": item.text.split("\n")}
    return {"type": str(item.kind), "text": item.text}


def to_json(conversation: Conversation) -> dict[str, Any]:
    """One object: ``format``, ``version``, the session, then each turn as a person reads it."""
    return {
        "format": "dsh-export",
        "version": EXPORT_VERSION,
        "dsh": __version__,
        "session": {"id": conversation.id, "project": conversation.project, "created": conversation.created},
        "reasoning": "kept" if conversation.reasoning else "omitted",
        "notes": [note for note in [_reasoning_note(conversation), *conversation.notes] if note],
        "turns": [
            {"turn": turn.number, "prompt": turn.prompt, **({"notice": True} if turn.notice else {}),
             "items": [_json_item(item) for item in turn.items], "end": turn.end, "usage": turn.usage}
            for turn in conversation.turns
        ],
    }


# --- HTML -----------------------------------------------------------------------------------------

_STYLE = """body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f6f6;padding:.5rem .75rem;border-radius:4px}
.prompt{background:#e8f0fe}.answer{background:none;font:inherit;padding:0}.end{color:#a00}
.usage,.meta{color:#666;font-size:90%}.tool{color:#555}details{margin:.5rem 0}"""


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def _html_item(item: Item) -> str:
    if item.kind is ItemKind.ANSWER:
        return f'<pre class="answer">{_e(item.text.rstrip())}</pre>'
    if item.kind is ItemKind.REASONING:
        return f"<details><summary>reasoning</summary><pre>{_e(item.text)}</pre></details>"
    if item.kind is ItemKind.TOOL_CALL:
        return f'<p class="tool">tool call <code>{_e(item.name)}</code></p><pre>{_e(item.text)}</pre>'
    return f'<pre class="tool">{_e(item.text)}</pre>'


def _html_turn(turn: Turn) -> str:
    parts = [f"<section><h2>{_e(_heading(turn))}</h2>", f'<pre class="prompt">{_e(turn.prompt)}</pre>']
    parts += [_html_item(item) for item in turn.items]
    if turn.end:
        parts.append(f'<pre class="end">{_e(chr(10).join(turn.end))}</pre>')
    if turn.usage:
        parts.append(f'<p class="usage">{_e(turn.usage)}</p>')
    return "\n".join(parts) + "</section>"


def to_html(conversation: Conversation) -> str:
    """One page: no script, no outside resource (the CSP forbids both), every text escaped."""
    note = _reasoning_note(conversation)
    meta = [f"project {conversation.project}", f"created {conversation.created}",
            f"exported by dsh {__version__}; secrets masked", *([note] if note else []), *conversation.notes]
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>dsh session {_e(conversation.id)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>dsh session {_e(conversation.id)}</h1>",
        *(f'<p class="meta">{_e(line)}</p>' for line in meta),
        *(_html_turn(turn) for turn in conversation.turns),
        "</body></html>", "",
    ])
