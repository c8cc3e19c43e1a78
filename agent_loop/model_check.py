"""The first turn's look at the endpoint's ``GET /models``: a configured model the endpoint does not list is one
line naming the model asked for and what the endpoint lists (docs/endpoints.md, "Is the model served?"); a local
server that says its context size (llama.cpp's ``GET /props``, vLLM's and LM Studio's ``/models`` fields) has it
kept for the context fill, and one line when dsh's own fixed prefix alone does not fit (docs/endpoints.md,
"Local servers").

Once per session, beside the first turn's request (never before it), in the turn's task group: it is cancelled
with the turn, it gives up after :data:`MODELS_TIMEOUT`, and once the turn has ended it has at most
:data:`AFTER_TURN_GRACE` more. Nothing is said when ``/models`` is not served, fails, is slow or does not answer
200 with a list: never a guess, never a failed turn. The names are the server's text: at most
:data:`MAX_NAMES` of them, each cut to :data:`MAX_NAME_CHARS`, whitespace folded, secrets masked; the front end
sanitizes the line as it does every notice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar, runtime_checkable

import anyio

from dsh.agent_loop.session_config import EndpointClient
from dsh.llm import redact_text
from dsh.llm.context_size import ServerContext, server_context
from dsh.llm.endpoint import Endpoint

__all__ = ["AFTER_TURN_GRACE", "MAX_NAMES", "MAX_NAME_CHARS", "MODELS_TIMEOUT", "ModelCheck", "listed_names",
           "not_listed_line"]

MODELS_TIMEOUT = 2.0  # seconds GET /models may take, from the first turn's start
T = TypeVar("T")

AFTER_TURN_GRACE = 0.5  # seconds it may still take once the turn has ended
MAX_NAMES = 10  # names shown
MAX_NAME_CHARS = 60  # characters of each
_MAX_READ = 1000  # entries of the list looked at
Notify = Callable[[str], None]


ContextSeen = Callable[[ServerContext], "str | None"]  # the session's: keeps the size, says when dsh does not fit


@runtime_checkable
class NamedEndpoint(Protocol):
    """A client that knows which server answers it (``DeepSeekClient.endpoint``, learned from its headers)."""

    endpoint: Endpoint


async def _server_context(client: Any, model: str, name: str | None, models: Any) -> ServerContext | None:
    """What the server says its context size is (llm/context_size.py); None for anything else, never a raise."""
    try:
        return await server_context(client, model, name=name, models=models)
    except Exception:  # a client that cannot ask the origin, a malformed answer: no line, never a failed turn
        return None


@runtime_checkable
class ModelLister(Protocol):
    """A client that can ``GET`` a JSON path as a turn would (``DeepSeekClient.get_json``)."""

    def get_json(self, path: str, *, tapped: bool = True) -> Awaitable[tuple[int, Any]]: ...


def listed_names(body: Any) -> list[str] | None:
    """The ``id`` of each entry of an OpenAI-shaped ``{"data": [{"id": ...}, ...]}``, or None for another shape."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [item["id"] for item in data[:_MAX_READ] if isinstance(item, dict) and isinstance(item.get("id"), str)]


def _shown(name: str, secrets: tuple[str, ...]) -> str:
    folded = " ".join(redact_text(name, secrets).split())
    return folded if len(folded) <= MAX_NAME_CHARS else folded[: MAX_NAME_CHARS - 1] + "…"


def not_listed_line(model: str, names: list[str], endpoint: str, secrets: tuple[str, ...] = ()) -> str | None:
    """The line for ``model`` when ``names`` (a non-empty list) does not hold it; None when it does."""
    if not names or model in names:
        return None
    shown = ", ".join(_shown(name, secrets) for name in names[:MAX_NAMES])
    more = f" and {len(names) - MAX_NAMES} more" if len(names) > MAX_NAMES else ""
    return (f"dsh: warning: model {_shown(model, secrets)} is not listed by GET /models at {endpoint}; "
            f"it lists {shown}{more}")


class ModelCheck:
    """The check of one session: due until the first turn has started it."""

    def __init__(self) -> None:
        self.due = True

    def take(self, client: EndpointClient | None, model: str,
             context: ContextSeen | None = None) -> Callable[[Notify], Coroutine[Any, Any, None]]:
        """The check to run beside this turn (a no-op after the first), reporting through ``notice``; ``context`` is
        told the context size a local server says it serves, and says the line for it (docs/endpoints.md)."""
        due, self.due = self.due, False
        lister = client if due and isinstance(client, ModelLister) else None

        async def check(notice: Notify) -> None:
            if lister is None or client is None:
                return
            line = found = None
            with anyio.move_on_after(MODELS_TIMEOUT):
                try:
                    status, body = await lister.get_json("/models", tapped=False)  # not the turns' record
                except Exception:  # not served, refused, malformed: no line, never a failed turn
                    return
                names = listed_names(body) if status == 200 else None
                line = not_listed_line(model, names or [], client.base_url_display, client.secrets)
                if context is not None and isinstance(client, NamedEndpoint):
                    # {}: /models was asked already and said nothing; it is not asked twice.
                    found = await _server_context(lister, model, client.endpoint.name, body if status == 200 else {})
            for said in (line, context(found) if context is not None and found is not None else None):
                if said is not None:
                    notice(said)

        return check

    async def beside(self, client: EndpointClient | None, model: str, notice: Notify,
                     turn: Callable[[], Awaitable[T]], context: ContextSeen | None = None) -> T:
        """``turn()``, with the first turn's check beside it in the turn's own task group: cancelled with the turn,
        and given :data:`AFTER_TURN_GRACE` once the turn has ended."""
        check = self.take(client, model, context)
        raised: Exception | None = None  # raised as itself, not in the group's ExceptionGroup (the check never raises)
        async with anyio.create_task_group() as group:
            group.start_soon(check, notice)
            try:
                result = await turn()
            except Exception as exc:
                raised = exc
            group.cancel_scope.deadline = min(group.cancel_scope.deadline, anyio.current_time() + AFTER_TURN_GRACE)
        if raised is not None:
            raise raised
        return result
