"""The front-end driver every mode shares: a line in, a command or a turn out, rendered to its front end.

A :class:`Shell` holds one :class:`~dsh.agent_loop.session.Session` (the agent, its log, usage, the last
failure), the :class:`~dsh.repl.frontend.Display` that renders the session's events to a
:class:`~dsh.repl.frontend.FrontEnd`, and what only the REPL has: slash commands, the line handed back to
the next prompt, ``/exit``. The modes differ only in the front end they pass in (docs/architecture.md,
"Front ends over one session"). :func:`open_shell` is what every terminal mode does before its first line: the
run's endpoint (:mod:`dsh.repl.endpoint`) and a started shell over it, both held open by the mode's exit stack.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import anyio

from dsh.agent_loop.reasons import EndReason
from dsh.agent_loop.session import Session, StartupError
from dsh.llm import HarnessError, error_chain
from dsh.repl import commands
from dsh.repl.config import Config
from dsh.repl.endpoint import Endpoint, configured_endpoint, open_endpoint
from dsh.repl.frontend import Display, FrontEnd, Sink
from dsh.repl.lazy import module
from dsh.repl.options import LaunchOptions
from dsh.repl.pasted_images import PastedImages
from dsh.repl.renderer import Renderer
from dsh.repl.usage import CONTEXT_WARNING_AT, context_warning, usage_line

if TYPE_CHECKING:
    from dsh.agent_loop.prompt_shell import PromptShell
    from dsh.agent_loop.tools import Tool

__all__ = ["Shell", "StartupError", "color", "open_shell"]


def color(env: Mapping[str, str], stream: TextIO) -> bool:
    return stream.isatty() and not env.get("NO_COLOR") and env.get("TERM") != "dumb"


class Shell:
    """One session shown on one front end, and the REPL's commands over it."""

    def __init__(
        self,
        config: Config,
        frontend: FrontEnd,
        *,
        color: bool,
        env: Mapping[str, str] | None = None,
        endpoint: Endpoint | None = None,
        show_usage: bool = False,
        answer: Sink | None = None,
        answer_markdown: bool = False,
        extra_tools: Callable[[Session], Sequence[Tool]] | None = None,
        allow_mcp: bool = False,
    ) -> None:
        """``endpoint``: the run's (dsh.repl.endpoint); the configured one unless given.

        ``answer`` (``-p``): the answer text goes there, everything else to the front end; with
        ``answer_markdown`` (``answer`` is a colour terminal) rendered as Markdown (docs/markdown.md).

        ``allow_mcp`` (``--allow-mcp``): MCP tools that would ask run without asking (docs/mcp.md).

        ``show_usage``: the dim usage line after each turn and the context warning (interactive only).
        """
        self.config = config
        self.frontend = frontend
        self.endpoint = endpoint if endpoint is not None else configured_endpoint(config)
        self.session = self.endpoint.session(
            config, dict(os.environ if env is None else env),
            approve=frontend.ask_approval if frontend.can_approve else None, extra_tools=extra_tools,
            allow_mcp=allow_mcp,
        )
        # Markdown needs colour (NO_COLOR and pipes get the text verbatim); a front end that keeps the
        # unfinished line aside lets it stream raw and be rewritten, any other gets whole lines.
        markdown = ("live" if frontend.rewrites_partial else "lines") if color and config.markdown else None
        self.renderer = Renderer(color=color, secrets=config.secrets, sources=self.endpoint.sources,
                                 markdown=markdown)
        self.display = Display(self.session, frontend, self.renderer, answer=answer,
                               answer_markdown=answer_markdown and config.markdown)
        self.show_usage = show_usage
        self.prefill = ""  # text the next prompt starts with (what was typed during a turn)
        self.pasted = PastedImages()  # image paths pasted at the prompt, sent with it
        self.vi_mode = config.vi_mode  # the prompt's key bindings: vi or emacs; /vim switches (docs/prompt.md)
        self.exit_code: int | None = None  # set by /exit
        self._bang: PromptShell | None = None  # the `!` commands, made at the first (docs/prompt.md)
        self._context_warned = False  # the 80% line was shown and the fill has not dropped below since

    @property
    def env(self) -> dict[str, str]:
        return self.session.env

    async def start(self, resume: str | None = None, *, defer_agent: bool = False,
                    session_id: str | None = None) -> None:
        await self.session.start(resume, defer_agent=defer_agent, session_id=session_id)

    async def aclose(self) -> None:
        await self.session.aclose()

    def say(self, text: str) -> None:
        """Command output: whole lines, each on its own line."""
        self.display.say(text)

    def report_resumed(self) -> None:
        """``resumed session <id> (N turns)`` and a short recap of its last turns (sanitized by the front end)."""
        from dsh.repl.sessions import recap_lines  # the log's reader: only a resumed session gets here

        log = self.session.log
        if log is None:
            return
        for line in recap_lines(log.id, log.last_turn, self.session.recap, repaired_turn=log.repaired_turn,
                                secrets=self.config.secrets):
            self.frontend.write(self.renderer.line(line))

    # --- turns -----------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _shown(self, *, end_line: bool, usage: bool) -> AsyncIterator[None]:
        """The front end's turn view around a turn; its last lines are written while the view still stands."""
        async with self.frontend.turn_view():
            yield
            if end_line:
                self.display.end_turn()
            if usage:
                self._show_usage()

    def _turn_shown(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self._shown(end_line=True, usage=True)

    def _compaction_shown(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self._shown(end_line=False, usage=True)

    async def run_turn(self, prompt: str, *, images: Sequence[Path] = ()) -> EndReason:
        """One turn (a compaction first when the window is nearly full: Session.run_turn), rendered as it streams;
        how it ended. An ``@!`` in the prompt sends the last ``!`` command's output with it; ``images``: image files
        the user named (``--image``, a pasted path: agent_loop/image_input.py)."""
        images = [*images, *self.pasted.take(prompt)]  # pasted image paths still in the prompt (repl/pasted_images.py)
        attached = ""
        if self._marked(prompt):
            attached = self._bang.attachment() if self._bang is not None else ""
            if not attached:
                self.say(self._words.NOTHING_KEPT)
        return await self.session.run_turn(prompt, scope=self._turn_shown, compact_scope=self._compaction_shown,
                                           attached=attached, images=images)

    async def compact(self, focus: str) -> None:
        await self.session.compact(focus, scope=self._compaction_shown)

    async def deliver_notices(self) -> EndReason | None:
        """A turn for background-job notices the model has not seen yet, if any."""
        return await self.session.deliver_notices(scope=lambda: self._shown(end_line=True, usage=False))

    def _show_usage(self) -> None:
        """The dim usage line after a turn or a compaction, then the context warning (interactive only)."""
        if not self.show_usage:
            return
        if self.session.turn_usage.requests:
            self.frontend.write(self.renderer.dim_line(usage_line(self.session.turn_usage, self.config.models)))
        fill = self.session.context_fill()
        if fill is None or fill < CONTEXT_WARNING_AT:
            self._context_warned = False
        elif not self._context_warned:  # once, again only after the fill dropped below (by /compact, say)
            self._context_warned = True
            self.frontend.write(self.renderer.line(context_warning(fill)))

    async def handle_line(self, line: str) -> EndReason | None:
        """A slash command or a prompt. Returns how the turn ended, or None when no turn ran."""
        text = line.strip()
        if not text:
            return None
        if "@!" in text:  # the prefilled `@! ` before a command typed after it is dropped (docs/prompt.md)
            line = self._words.unmarked(line)
            text = line.strip()
        if text.startswith(("//", "\\!")):  # an escaped slash or bang: send "/..." or "!..." as a prompt
            return await self.run_turn(line.lstrip()[1:])
        if text.startswith("!"):
            await self.run_command(text[1:])
            return None
        if text.startswith("/"):
            return await commands.dispatch(self, text)
        return await self.run_turn(line)

    def cancel_turn(self) -> None:
        self.session.cancel_turn()

    # --- `!command` (agent_loop/prompt_shell.py; docs/prompt.md) ---------------------------------------

    @property
    def _words(self) -> Any:
        """The `!` module, by name: it imports the tools, which the first prompt is drawn without (docs/architecture.md,
        "Start-up and lazy imports"); a prompt's line gets here once the agent's modules are in."""
        return module("dsh.agent_loop.prompt_shell")

    def _marked(self, prompt: str) -> bool:
        return "@!" in prompt and bool(self._words.has_marker(prompt))

    async def run_command(self, typed: str) -> None:
        """``!command``, or ``!!`` (``typed`` is ``!``): run it as run_shell runs one, nobody asked (the user typed it),
        its output and status shown and kept for ``@!``, and a ``shell/run`` record in the session log."""
        agent = self.session.ensure_agent()  # the log and the redactor
        words = self._words
        if self._bang is None:
            self._bang = words.PromptShell(sandbox=self.config.sandbox, network=self.config.sandbox_network)
        bang = self._bang
        command = bang.last_command if typed == "!" else typed
        if not command or not command.strip():
            self.say(words.NO_LAST_COMMAND if typed == "!" else "! needs a command (!! runs the last one again)")
            return
        ran = event = None
        async with self.frontend.turn_view():
            with anyio.CancelScope() as scope:  # Ctrl-C (the live view's, or SIGINT) cancels it: Session.cancel_turn
                self.session.command_scope, self.session.turn_running = scope, True
                try:
                    ran, event = await bang.run(command, cwd=self.session.cwd, redactor=agent.redactor)
                finally:
                    self.session.command_scope, self.session.turn_running = None, False
            if ran is None:
                self.say("[cancelled; the command was killed]")
                return
            self.say(ran.output.rstrip("\n") or "(no output)")
            self.say(ran.status)
            self.say(words.ATTACH_HINT)
        self.prefill = words.MARKER + " " + self.prefill  # the REPL's next prompt starts with it; delete to leave out
        log = self.session.log
        if event is not None and log is not None and not log.closed:
            try:
                log.append(event)
            except HarnessError as exc:  # shown already; the next turn's own write fails as SESSION_LOG
                self.say(f"the ! run was not logged: {error_chain(exc)}")


async def open_shell(
    stack: contextlib.AsyncExitStack,
    options: LaunchOptions,
    config: Config,
    env: dict[str, str],
    frontend: FrontEnd,
    *,
    color: bool,
    show_usage: bool = False,
    answer: Sink | None = None,
    answer_markdown: bool = False,
    defer_agent: bool = False,
    session_id: str | None = None,
) -> Shell:
    """A started shell on ``frontend`` over the endpoint ``options`` pick (``shell.endpoint``), both held open by
    ``stack``; StartupError if not.

    With ``defer_agent`` the agent is built behind the first prompt (the interactive mode sees to it), and a
    new session is named ``session_id`` if given (the id the early banner showed, dsh.repl.first_prompt).
    """
    try:
        endpoint = await open_endpoint(stack, options, config)
    except Exception as exc:
        raise StartupError(exc)
    shell = Shell(config, frontend, color=color, env=env, endpoint=endpoint, show_usage=show_usage, answer=answer,
                  answer_markdown=answer_markdown, allow_mcp=options.allow_mcp)
    stack.push_async_callback(shell.aclose)
    await shell.start(resume=options.resume, defer_agent=defer_agent, session_id=session_id)
    return shell
