"""One subagent run, whatever the provider: :class:`Run`, its :class:`Outcome`, and the :class:`Provider`.

A provider is a :class:`Run` subclass that implements :meth:`Run.execute` (the whole run: spawn the
child, talk to it, tear it down) plus a module-level ``from_config(name, table, parent) -> Provider``.
Both are generic over the provider's settings, a frozen dataclass that conforms to
:class:`ProviderSettings`: ``AcpRun(Run[AcpSettings])`` reads ``self.settings.mode`` as the checker sees
it, while the registry, jobs and the tool hold any :data:`AnyProvider`. Everything else is here, once:

* the run's body runs in a task group the caller owns — ``run.start(tg)``, or ``async with
  provider.run(request) as run`` which holds one for the block — so nothing outlives its owner;
* :meth:`Run.cancel` is local cancellation: the result settles ``aborted`` at once with no
  diagnostic, then the body is cancelled and its own cleanup reaps the child;
* :meth:`Run.dispose` is idempotent, always called, returns nothing, and returns only once the body
  (and so every child it started) is gone;
* the :class:`Outcome` of ``execute`` becomes the :class:`~dsh.agent_loop.subagent.result.SubagentResult`:
  failure lines are built by :func:`~dsh.agent_loop.subagent.diagnostics.failure_line` from closed
  facts only, and the host log gets the same facts plus the cause's exception *type names*;
* a run that did not succeed also gets a :class:`~dsh.agent_loop.subagent.result.SubagentFailure`, the
  record ``/why`` shows: the diagnostic, the agent's own words (a JSON-RPC error's message and data, a
  provider's :attr:`Failure.words`, the last lines of the child's stderr; masked and bounded, also
  logged to dsh.log at warning) and the raw cause beneath. Never the model's.

See ``docs/adding-a-provider.md`` for a worked example.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeAlias, TypeVar

import anyio
import anyio.abc

from dsh.agent_loop.frames import FrameLog, FrameTap
from dsh.agent_loop.jsonrpc import ProtocolError
from dsh.agent_loop.owned_group import OwnedTaskGroup
from dsh.agent_loop.settings import SettingsError
from dsh.agent_loop.subagent.diagnostics import Failure, failure_line, join_lines, safe_token
from dsh.agent_loop.subagent.result import (
    FAILURE_HEADLINES,
    AgentWords,
    SubagentFailure,
    SubagentRequest,
    SubagentResult,
)
from dsh.llm.errors import chain_links
from dsh.llm.redact import MIN_SECRET_CHARS, GrowingText, Redactor, environment_secrets

if TYPE_CHECKING:  # the providers load it (with asyncio) when they run; the registry alone need not
    from dsh.agent_loop.process import ManagedProcess

__all__ = [
    "AnyProvider",
    "AnyRun",
    "ChildExited",
    "Outcome",
    "Provider",
    "ProviderSettings",
    "Run",
    "SubagentConfigError",
    "before_exit",
    "configured",
]

log = logging.getLogger(__name__)


class ProviderSettings(Protocol):
    """What :class:`Run` reads of every provider's settings: the env its child is given explicitly.

    Required of every provider so none can forget it: the secret values in it are masked in the run's output.
    """

    @property
    def env(self) -> Mapping[str, str]: ...


# Covariant: a Provider[AcpSettings] is an AnyProvider (the settings are read, never replaced).
SettingsT = TypeVar("SettingsT", bound=ProviderSettings, covariant=True)
_Settings = TypeVar("_Settings", bound=ProviderSettings)
_Answer = TypeVar("_Answer")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What :meth:`Run.execute` ended with: closed facts only (the diagnostic is built from them).

    ``failure`` is the run's failure line, ``teardown`` a failed cleanup after it, ``note`` one more
    fixed line (a permission or unattended decision). Success and local cancellation carry none.
    ``warning`` is a fixed host-side line whatever the stop reason (see ``SubagentResult.warning``).
    """

    stop_reason: str
    output: str = ""
    failure: Failure | None = None
    teardown: Failure | None = None
    note: str | None = None
    warning: str | None = None


class Run(Generic[SettingsT]):
    """One delegated task. Subclasses implement :meth:`execute` (and may override :meth:`partial_output`).

    ``product`` names a product provider ("Claude Code", "Codex"): its failures use the product line.
    ``configuration`` is the failure of a run whose table was unusable (its stage is the provider's).
    """

    product: ClassVar[str | None] = None
    configuration: ClassVar[Failure]
    endpoint: str | None = None  # where a product child was sent, by closed name: its failure line says it

    def __init__(self, provider: Provider[SettingsT], request: SubagentRequest) -> None:
        self.name = provider.name
        self._settings = provider.settings
        self.request = request
        self._problem = provider.problem
        self._frames = provider.frames
        self._scope = anyio.CancelScope()
        self._settled = anyio.Event()
        self._finished = anyio.Event()
        self._result: SubagentResult | None = None
        self._started = False
        self._own_group = OwnedTaskGroup()  # when entered as a context manager
        # Everything the child says is masked here, once, for every provider (docs/subagents.md: output, partial
        # output, job output): the parent's secrets, the secret values of the env it was given, shapes.
        given = {**(self._settings.env if self._settings is not None else {}), **(request.env or {})}
        self._redactor = Redactor((*provider.secrets, *environment_secrets(given, min_chars=MIN_SECRET_CHARS)))
        self._partial = GrowingText(self._redactor)
        # The child, once the provider started it: a failed run keeps the last lines of its stderr host-side.
        self.process: ManagedProcess | None = None  # tests read its pid too

    def frame_tap(self) -> FrameTap | None:
        """What the run's JSON-RPC connection tells of each frame (the closed facts a report keeps), if kept."""
        return self._frames.tap(f"subagent {self.name}") if self._frames is not None else None

    @property
    def settings(self) -> SettingsT:
        """The parsed table. A run whose table was unusable has none, and never reaches :meth:`execute`."""
        if self._settings is None:
            raise RuntimeError(f"subagent {safe_token(self.name)} has no settings: its table was unusable")
        return self._settings

    # -- what a provider implements ----------------------------------------------------------------

    async def execute(self) -> Outcome:  # pragma: no cover - abstract
        """The run's body, in one task: everything it opens it also closes. Cancellable at any await."""
        raise NotImplementedError

    def partial_output(self) -> str:
        """The child's text so far (a background job shows it while the run goes on)."""
        return ""

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self, tg: anyio.abc.TaskGroup) -> Run[SettingsT]:
        """Run the body in ``tg`` (the caller's task group). Once per run."""
        if self._started:
            raise RuntimeError("a subagent run starts once")
        self._started = True
        tg.start_soon(self._body, name=f"subagent {safe_token(self.name)}")
        return self

    async def __aenter__(self) -> Run[SettingsT]:
        return self.start(await self._own_group.open())

    async def __aexit__(self, *exc_info: Any) -> None:
        try:
            await self.dispose()
        finally:
            await self._own_group.close()

    async def result(self) -> SubagentResult:
        """The settled result; never raises for a child-level failure."""
        await self._settled.wait()
        assert self._result is not None
        return self._result

    async def cancel(self) -> None:
        """Local cancellation: settle ``aborted`` now (no diagnostic), then stop the body."""
        self._settle(SubagentResult(self._final_output(), "aborted"))
        self._scope.cancel()

    async def dispose(self) -> None:
        """Stop the run if it still runs and wait until its body (and every child) is gone. Idempotent."""
        if not self._started:
            self._started = True
            self._settle(SubagentResult("", "aborted"))
            self._finished.set()
        elif not self._finished.is_set():
            await self.cancel()
        with anyio.CancelScope(shield=True):
            await self._finished.wait()

    # -- the body --------------------------------------------------------------------------------------

    async def _body(self) -> None:
        outcome: Outcome | None = None
        try:
            with self._scope:
                if self._problem is not None:
                    log.info("subagent %s: configuration problem: %s", safe_token(self.name), self._problem)
                    outcome = Outcome("error", failure=self.configuration)
                else:
                    outcome = await self.execute()
        except Exception as exc:  # a provider broke its contract: still a settled, safe result
            log.exception("subagent %s: the run raised", safe_token(self.name))
            outcome = Outcome("error", self._raw_output(), Failure(None, None, cause=exc))
        finally:
            # No outcome: cancelled (locally, or by the caller's scope): a local end, no diagnostic.
            self._settle(
                self._to_result(outcome) if outcome is not None else SubagentResult(self._final_output(), "aborted")
            )
            self._finished.set()

    def output_so_far(self) -> str:
        """:meth:`partial_output` masked, never raising; a tail that may be the start of a secret waits."""
        return self._partial.view(self._raw_output())

    def _final_output(self) -> str:
        return self._redactor(self._raw_output())

    def _raw_output(self) -> str:
        try:
            text = self.partial_output()
        except Exception:
            return ""
        return text if isinstance(text, str) else ""

    def _settle(self, result: SubagentResult) -> None:
        if self._result is None:
            self._result = result
            self._settled.set()

    def _to_result(self, outcome: Outcome) -> SubagentResult:
        output = self._redactor(outcome.output)
        lines = [self._line(failure) for failure in (outcome.failure, outcome.teardown) if failure is not None]
        quiet = outcome.stop_reason == "completed" or (
            outcome.stop_reason == "aborted" and outcome.failure is None and outcome.note is None
        )
        if quiet:  # success and a plain abort carry no diagnostic (a failed cleanup is logged above)
            return SubagentResult(output, outcome.stop_reason, warning=outcome.warning)
        diagnostic = join_lines(*lines, outcome.note)
        record = self._record(outcome, diagnostic)
        return SubagentResult(output, outcome.stop_reason, diagnostic, warning=outcome.warning, cause=record)

    def _record(self, outcome: Outcome, diagnostic: str | None) -> SubagentFailure:
        """/why's record of a run that did not succeed, with the agent's own words (also logged, masked)."""
        failures = [failure for failure in (outcome.failure, outcome.teardown) if failure is not None]
        cause = next((failure.cause for failure in failures if failure.cause), None)
        said = tuple(piece for failure in failures for piece in (*failure.words, *_error_words(failure.cause)))
        stderr = self.process.stderr_lines() if self.process is not None and failures else ""
        words = AgentWords.gather(said, stderr, self._redactor)
        line = diagnostic or FAILURE_HEADLINES.get(outcome.stop_reason, FAILURE_HEADLINES["error"])
        if words:
            log.warning("subagent %s: %s\n%s", safe_token(self.name), line, "\n".join(words.lines()))
        return SubagentFailure(line, words, cause)

    def _line(self, failure: Failure) -> str:
        # Host log: the closed facts and the cause's type names; messages and stderr can carry child text.
        log.info(
            "subagent %s: %s/%s (cause: %s; exit: %s)",
            safe_token(self.name),
            failure.stage or "unknown",
            failure.category or "unknown",
            _cause_types(failure.cause),
            failure.exit_status,
        )
        return failure_line(failure, provider=self.name, product=self.product, endpoint=self.endpoint)


def _error_words(exc: BaseException | None) -> tuple[tuple[str, object], ...]:
    """A child dsh's JSON-RPC error answer in the cause chain: its data, as it sent it (its message is in
    the chain already). ACP agents' answers are read by their provider (``Failure.words``)."""
    for link in _chain(exc):
        if isinstance(link, ProtocolError) and link.rpc_code is not None:
            return (("error data", link.data),) if link.data is not None else ()
    return ()


def _chain(exc: BaseException | None) -> list[BaseException]:
    """``exc`` and its causes (bounded: a cycle or a deep chain ends the walk)."""
    links: list[BaseException] = []
    while exc is not None and len(links) < 16 and all(exc is not seen for seen in links):
        links.append(exc)
        exc = exc.__cause__ or exc.__context__
    return links


def _cause_types(exc: BaseException | None) -> str:
    """``ConnectionError <- OSError``: the type names of a cause chain, never its messages."""
    if exc is None:
        return "none"
    return " <- ".join(link.type_name for link in chain_links(exc))


@dataclass(frozen=True, slots=True)
class Provider(Generic[SettingsT]):
    """A configured subagent (``[subagents.NAME]``): its run class and parsed settings.

    ``problem`` (host-only text) makes every run fail with the run class's ``configuration``
    failure, and then there are no ``settings``; ``hint`` is the one line the REPL shows when the
    provider's optional SDK is missing.
    """

    name: str
    run_type: type[Run[SettingsT]]
    settings: SettingsT | None = None
    problem: str | None = None
    hint: str | None = None
    secrets: tuple[str, ...] = ()  # masked in every run's output, with the run's secret env values
    frames: FrameLog | None = None  # the session's memory of its children's frames, for /report
    description: str = ""  # the table's ``description``: what the subagent tool tells the model it is for

    def run(self, request: SubagentRequest) -> Run[SettingsT]:
        """A new, not yet started run of ``request``."""
        return self.run_type(self, request)


class SubagentConfigError(SettingsError):
    """A ``[subagents.NAME]`` table that cannot be used, in the one settings form (agent_loop/settings.py): the
    message names the table and key only."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"[subagents.{name}] {message}")
        self.subagent = name


AnyProvider: TypeAlias = Provider[ProviderSettings]  # what the registry, jobs and the tool hold
AnyRun: TypeAlias = Run[ProviderSettings]


def configured(name: str, run_type: type[Run[_Settings]], parse: Callable[[], _Settings]) -> Provider[_Settings]:
    """The ``from_config`` policy of every provider: a bad table never raises.

    ``parse()`` gives the settings; when it raises
    :class:`SettingsError` the problem (which names only the table and
    key) goes to the host log as a warning now, and every run fails with ``category: configuration``.
    """
    try:
        settings = parse()
    except SettingsError as exc:  # the readers' error, or a provider's own SubagentConfigError
        log.warning("%s", exc)
        return Provider(name, run_type, problem=str(exc))
    return Provider(name, run_type, settings)


class ChildExited(Exception):
    """The child exited, and its pipe had the grace to drain, before the request was answered."""


async def before_exit(process: ManagedProcess, request: Callable[[], Awaitable[_Answer]], grace: float) -> _Answer:
    """``await request()`` while watching ``process``: its answer (or what it raised), else :class:`ChildExited`.

    An answer the child wrote just before it died may still be in the pipe: ``grace`` seconds after the
    exit it still counts.
    """
    answers: list[_Answer] = []
    errors: list[Exception] = []
    async with anyio.create_task_group() as tg:

        async def ask() -> None:
            try:
                answers.append(await request())
            except Exception as exc:  # re-raised below, outside the task group
                errors.append(exc)
            tg.cancel_scope.cancel()

        async def watch_exit() -> None:
            await process.wait_exit()
            await anyio.sleep(grace)
            tg.cancel_scope.cancel()

        tg.start_soon(ask)
        tg.start_soon(watch_exit)
    if errors:
        raise errors[0]
    if not answers:
        raise ChildExited
    return answers[0]
