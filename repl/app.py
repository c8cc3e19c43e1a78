"""The interactive REPL: a prompt_toolkit prompt between turns, a small live view during a turn.

Between turns ``PromptSession.prompt_async`` reads a line (history, completion, multiline, the
toolbar: repl/prompt_line.py, and what needs the shell, repl/prompt_parts.py). While a turn runs a second, tiny
application owns the terminal: it shows the line that
is still streaming and the toolbar (``waiting for first token 12s · keep-alive 2s ago``), binds
Ctrl-C to cancel the turn and asks shell-command approvals inline. Complete lines are written
above it, raw (erasing the view, writing, drawing it again); the partial line lives in the view until its newline
arrives, so the view is always drawn from column 0 and nothing is ever glued or overdrawn.

Outside any application (the short gaps between them) the terminal is in cooked mode and Ctrl-C
is a SIGINT, which a signal receiver turns into the same actions.

A new session's first prompt reads keys before the shell and the session are imported: the shell is opened behind
it (:meth:`InteractiveApp.run_opening`), and a line sent before that waits for it. So this module imports neither
at its top (docs/architecture.md, "Start-up and lazy imports").

This module is the app: the loop, what start-up leaves for behind the first prompt, the signals and the live view.
What writes to the terminal is repl/terminal_sink.py; what the live view holds between keys, repl/live_view_state.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from prompt_toolkit import PromptSession
from prompt_toolkit.application import Application
from prompt_toolkit.application.current import get_app_session
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.filters import Condition
from prompt_toolkit.formatted_text import ANSI, AnyFormattedText
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.keys import Keys
from prompt_toolkit.layout import ConditionalContainer, HSplit, Layout, Window
from prompt_toolkit.layout.controls import FormattedTextControl
from prompt_toolkit.patch_stdout import patch_stdout

from dsh.llm import unwrap_group
from dsh.repl.approvals import Approval, approval_answer, question_for
from dsh.repl.config import Config, history_path
from dsh.repl.first_prompt import ENDING_SIGNALS, PROMPT, ending_status, typed_ahead
from dsh.repl.lazy import entry, module
from dsh.repl.live_view_state import LiveViewState
from dsh.repl.options import DrawnPrompt, LaunchOptions
from dsh.repl.prompt_line import NARROW_COLUMNS, SafeHistory, Toolbar, new_prompt, prompt_keys
from dsh.repl.styles import terminal_text
from dsh.repl.terminal_sink import TerminalSink

if TYPE_CHECKING:
    from dsh.agent_loop.tools.edits import EditRequest
    from dsh.agent_loop.tools.registry import Approval as ToolApproval
    from dsh.agent_loop.tools.registry import McpCallRequest
    from dsh.repl.prompt_parts import PromptParts
    from dsh.repl.shell import Shell

__all__ = ["InteractiveApp", "SafeHistory", "run_interactive"]

DOUBLE_CTRL_C_WINDOW = 2.0
_SIGNALS = (signal.SIGINT, *ENDING_SIGNALS)  # a quit or hangup by kill too: raw mode makes Ctrl-\ a key
_WAKE = "\x00wake"  # what the prompt returns when a background job's notice wakes the idle owner
EXIT_HINT = "(press Ctrl-C again to exit, or Ctrl-D)"
_ANSWERS: dict[str, ToolApproval] = {"y": "yes", "n": "no", "a": "always"}  # an approval key to its answer
OpenShell = Callable[[], Awaitable["Shell"]]  # run_opening's: the shell opened, behind the first prompt


class InteractiveApp:
    """The terminal front end: prompt, turns, keys. ``run(shell)`` returns the exit status.

    It is the :class:`~dsh.repl.frontend.FrontEnd` its shell writes to: text goes through a
    :class:`TerminalSink`, each turn runs under the live view, approvals are asked inline.
    """

    rewrites_partial = True  # the sink keeps an unfinished line aside
    can_approve = True

    def __init__(self, *, history: Path, config: Config | None = None) -> None:
        """``config``: what the prompt and the toolbar need while the shell is not open (``run_opening``)."""
        self.history_path = history
        self._config = config
        self._shell: Shell | None = None  # given to run(), or opened behind the first prompt (run_opening)
        self._parts: PromptParts | None = None  # what the prompt gains from the shell (repl/prompt_parts.py)
        self._output = get_app_session().output  # before patch_stdout replaces sys.stdout
        self.sink = TerminalSink(self._output)
        self._keys = prompt_keys(ctrl_c=lambda event: self._prompt_ctrl_c(event.current_buffer, event.app),
                                 expand=self._expand, cycle_mode=self._cycle_mode)
        self._toolbar = Toolbar(config, self._columns)
        self._session: PromptSession[str] | None = None
        self._view: Application[None] | None = None
        self._last_ctrl_c: float | None = None
        self._exit_status: int | None = None
        self._turn = LiveViewState()  # what the live view holds between keys: typed ahead, cancelling, a question
        self._startup_error: Exception | None = None  # a failure behind the prompt: raised once the prompt is gone
        self._first_prompt: DrawnPrompt | None = None  # drawn by start-up, taken over by the first prompt
        self._drawn = asyncio.Event()  # this prompt is on the screen: the agent's build may start
        self._open_shell: OpenShell | None = None  # run_opening's, until the shell is open
        self._opening: asyncio.Task[None] | None = None
        self._shell_opened = asyncio.Event()  # open, or its opening failed (the failure stored)
        self._line_taken_back = False  # Ctrl-C after a line was sent, before the shell was open: it does not run
        self._servers_opened = False

    # --- the front end a shell writes to ------------------------------------------------------------

    def write(self, text: str) -> None:
        self.sink.write(text)

    def flush(self) -> None:
        pass  # the sink writes complete lines itself, and drains when a view closes

    def turn_view(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self._turn_view()

    async def ask_approval(self, request: str | EditRequest | McpCallRequest) -> ToolApproval | None:
        return await self._ask_approval(request)

    def wake(self) -> None:
        self._wake_for_notice()

    @property
    def shell(self) -> Shell:
        assert self._shell is not None, "run() first"
        return self._shell

    # --- the loop ---------------------------------------------------------------------------------

    async def run(self, shell: Shell, *, banner: str, first_prompt: DrawnPrompt | None = None) -> int:
        """The REPL over an open shell until exit; ``first_prompt``: the banner and prompt start-up already drew, to
        take over."""
        self._shell_opened.set()
        return await self._run(first_prompt, shell, banner)

    async def run_opening(self, open_shell: OpenShell, *, first_prompt: DrawnPrompt) -> int:
        """The REPL until exit, its first prompt taking ``first_prompt`` over with the keys typed at it while
        ``open_shell`` opens the shell behind it (``_open_behind``)."""
        self._open_shell = open_shell
        return await self._run(first_prompt)

    async def _run(self, first_prompt: DrawnPrompt | None, shell: Shell | None = None, banner: str = "") -> int:
        self._first_prompt = first_prompt
        # Plain asyncio (prompt_toolkit's loop) until the first prompt is drawn: anyio's backend is
        # loaded with the agent, just after (see _build_agent).
        loop = asyncio.get_running_loop()
        for signum in _SIGNALS:
            loop.add_signal_handler(signum, self._on_signal, signum)
        try:
            with patch_stdout(raw=True):
                return await self._loop(shell, banner)
        finally:
            if self._opening is not None and not self._opening.done():
                self._opening.cancel()  # the loop ended first (a signal, a failure): the exit stack closes the rest
                await asyncio.wait([self._opening])
            for signum in _SIGNALS:
                loop.remove_signal_handler(signum)

    async def _loop(self, shell: Shell | None, banner: str) -> int:
        self.sink.prompt_toolkit_ran = True  # from the banner on (patch_stdout is running)
        config = shell.config if shell is not None else self._config
        assert config is not None, "a shell, or the config to open one with"
        self._session = new_prompt(self.history_path, self._keys, vi_mode=config.vi_mode, toolbar=self._prompt_toolbar)
        if shell is not None:
            self._attach(shell, banner)
        while True:
            line = await self._read_line()
            self._raise_startup_error()
            if line is None:
                break
            shell = await self._shell_for(line)
            if shell is None:
                continue
            if line != _WAKE:
                await shell.handle_line(line)
                if self._turn.leaving:  # Ctrl-D during the turn: the end of input, as at an empty prompt
                    break
            # Notices that arrived while idle (or during a command) get a turn of their own.
            await shell.deliver_notices()
            if shell.exit_code is not None:
                return shell.exit_code
            if self._exit_status is not None:
                break
        await self.sink.drain()
        return self._exit_status or 0

    async def _read_line(self) -> str | None:
        assert self._session is not None
        if self._exit_status is not None:
            return None  # an ending signal came before this prompt ran
        default = self._parts.before_prompt(self._session) if self._parts is not None else ""
        prompt = self._session.prompt_async(PROMPT, default=default, handle_sigint=False, pre_run=self._pre_run)
        try:
            async with asyncio.TaskGroup() as group:  # asyncio's: anyio's backend comes with the agent, behind it
                return await self._prompt_beside_startup(group, prompt)
        except BaseExceptionGroup as failures:
            raise unwrap_group(failures) from None  # one task's failure, as the loop would have seen it

    def _raise_startup_error(self) -> None:
        if self._startup_error is not None:
            raise self._startup_error  # the CLI says why, once the prompt is gone

    # --- what start-up deferred, behind the first prompt ----------------------------------------------

    def _pre_run(self) -> None:
        """Runs just before prompt_toolkit reads the typeahead, enters raw mode and draws the prompt."""
        if self._first_prompt is not None:
            self._first_prompt.take_over()  # echo back on before raw mode saves it; its prompt is drawn over
        self._line_taken_back = False
        self._drawn.set()  # the prompt is drawn before the awaiting task runs: the agent's build starts then
        if self._exit_status is not None:
            self._exit_prompt()  # an ending signal came while the prompt was being set up

    async def _prompt_beside_startup(self, group: asyncio.TaskGroup, prompt: Coroutine[Any, Any, str]) -> str | None:
        """The prompt's line (None: the input ended), read in ``group`` beside what start-up left for behind it: the
        first time, the shell opened (``_open_behind``, in a task of its own: a line sent meanwhile waits for it);
        while the session has no agent, its modules' import and its build, once the prompt is drawn; the first time,
        the session's MCP servers opened, once those modules are in or the line is, from this task: the one that
        closes them with the session (they never delay the prompt, docs/mcp.md). The line's end cancels an
        unfinished build: the line's turn builds the agent itself (Session.run_turn)."""
        self._drawn = asyncio.Event()
        imported_or_read = asyncio.Event()
        reading = group.create_task(self._line(prompt, imported_or_read))
        if self._open_shell is not None and self._opening is None:
            self._opening = asyncio.create_task(self._open_behind(self._open_shell, self._drawn))
        building = None
        if self._shell is None or self._shell.session.agent is None:
            building = group.create_task(self._build_agent(imported_or_read))
        if not self._servers_opened:
            self._servers_opened = True
            # Not before the agent's modules are in (the manager is one): importing it here meanwhile would wait
            # for the worker thread's import lock with the loop, and keys typed at the prompt with it.
            await imported_or_read.wait()
            await self._open_servers()
        line = await reading
        gc.enable()  # start-up is over (dsh.repl.launch paused the collector): a line's turn comes next
        if building is not None:
            building.cancel()
        return line

    @staticmethod
    async def _line(prompt: Coroutine[Any, Any, str], done: asyncio.Event) -> str | None:
        try:
            return await prompt
        except EOFError:
            return None
        except KeyboardInterrupt:  # only if a binding we did not override raised it
            return ""
        finally:
            done.set()

    async def _open_behind(self, open_shell: OpenShell, drawn: asyncio.Event) -> None:
        """Once the first prompt is drawn with the keys typed at the early one: the shell's modules (the session, the
        renderer, the commands) imported in a worker thread, so that keys typed meanwhile are drawn as they come; then
        the shell opened, and the prompt given its parts. A failure ends the prompt, and the loop raises it."""
        try:
            await drawn.wait()
            await self._typed_ahead_drawn()  # the import holds the interpreter: those keys first
            await asyncio.to_thread(module, "dsh.repl.prompt_parts")  # and dsh.repl.shell, with the session
            shell = await open_shell()
            self._attach(shell, shell.endpoint.label.banner(shell.session))
        except Exception as exc:
            self._fail(exc)
        finally:
            self._shell_opened.set()

    def _attach(self, shell: Shell, banner: str) -> None:
        """The shell is open: the prompt gains its parts, the session takes over a mode chosen meanwhile, and the
        banner is said unless start-up drew this one."""
        parts: type[PromptParts] = entry("dsh.repl.prompt_parts", "PromptParts")
        self._parts = parts(shell, self._keys)
        early_mode = self._toolbar.early_permissions
        if early_mode is not None and early_mode.mode != shell.session.permissions.mode:
            shell.session.permissions.set(early_mode.mode)  # Shift+Tab before the shell was open
        self._shell = shell
        if self._session is not None:
            self._session.completer = self._parts.completer
            self._session.app.invalidate()  # the toolbar, from the session now
        early = self._first_prompt
        if early is None or early.banner != banner:
            if early is not None:
                early.abandon()  # not what start-up promised (never expected): the real banner follows
            shell.say(banner)

    async def _shell_for(self, line: str) -> Shell | None:
        """The shell to handle ``line`` with, once it is open (a line sent before waits for it); None for a line not to
        run: blank while the shell was not open yet, taken back by Ctrl-C while it waited (``_on_signal``), or sent
        before an ending signal."""
        if self._shell is None and not line.strip():
            return None
        shell = await self._opened()
        self._raise_startup_error()
        return None if self._line_taken_back or self._exit_status is not None else shell

    async def _opened(self) -> Shell | None:
        """The shell, once open; None if its opening failed (the failure is stored: ``_raise_startup_error``)."""
        await self._shell_opened.wait()
        return self._shell

    def _fail(self, exc: Exception) -> None:
        """Start-up behind the prompt failed: the prompt ends, and the loop raises ``exc`` (the CLI says why)."""
        self._startup_error = exc
        self._exit_prompt()

    async def _open_servers(self) -> None:
        shell = await self._opened()
        if shell is None:
            return
        try:
            await shell.session.open_mcp()
        except Exception as exc:
            self._fail(exc)

    async def _build_agent(self, imported: asyncio.Event) -> None:
        """Once the prompt is drawn and the shell open: the agent's modules imported, then the agent built; a failure
        ends the prompt and the loop raises it (the CLI says why in one line)."""
        try:
            await self._drawn.wait()
            await self._typed_ahead_drawn()  # the import holds the interpreter: ~15 ms more until those keys show
            shell = await self._opened()
            if shell is None:
                return
            with contextlib.suppress(Exception):  # a broken install: the build below raises it, as a StartupError
                # Its modules take longer to import than the prompt took to draw: in a worker thread, so that keys
                # typed at the prompt meanwhile are drawn as they come (docs/architecture.md, "Start-up and lazy
                # imports").
                await asyncio.to_thread(_import_agent_modules)
        finally:
            imported.set()
        try:
            shell.session.ensure_agent()
            if self._parts is not None:
                self._parts.agent_built()  # a custom command's skipped line, the tree listed for @ completion
        except Exception as exc:
            self._fail(exc)
            return
        finally:
            gc.enable()  # start-up is over once the agent is in (dsh.repl.launch paused the collector for it)
        anyio.get_cancelled_exc_class()  # loads anyio's backend now rather than in the first turn

    async def _typed_ahead_drawn(self) -> None:
        """Until keys typed at the early prompt are drawn, or 0.5 s: the worker thread's import would delay them."""
        if self._session is None or self._first_prompt is None or not typed_ahead():
            return
        drawn, app = asyncio.Event(), self._session.app
        app.after_render += (note := lambda _app: drawn.set())
        with contextlib.suppress(TimeoutError):  # no render in time (the line ended first): the build goes on
            async with asyncio.timeout(0.5):
                await drawn.wait()
        app.after_render -= note

    # --- signals (only while no application owns the terminal, or sent by kill) -------------------

    def _on_signal(self, signum: int) -> None:
        shell = self._shell
        if signum in ENDING_SIGNALS:  # the turn ends, the prompt exits, prompt_toolkit restores the terminal
            self._exit_status = ending_status(signum)
            if shell is not None:
                shell.cancel_turn()
            self._exit_prompt()
        elif shell is not None and shell.session.turn_running:
            self._cancel_turn()
        elif self._session is not None and self._session.app.is_running:
            self._prompt_ctrl_c(self._session.app.current_buffer, self._session.app)
        elif shell is None:
            self._line_taken_back = True  # the line sent waits for the shell: Ctrl-C takes it back

    def _wake_for_notice(self) -> None:
        """A background job settled while the user sits at an empty prompt: let the model see it now."""
        app = self._session.app if self._session is not None else None
        if app is None or not app.is_running or app.current_buffer.text:
            return  # someone is typing: the notice rides along with their next prompt
        if app.future is not None and not app.future.done():
            app.exit(result=_WAKE)

    def _exit_prompt(self) -> None:
        app = self._session.app if self._session is not None else None
        if app is not None and app.is_running and app.future is not None and not app.future.done():
            app.exit(exception=EOFError())

    # --- the prompt's keys and toolbar (repl/prompt_line.py) --------------------------------------------

    def _columns(self) -> int:
        try:
            return self._output.get_size().columns
        except OSError:
            return NARROW_COLUMNS

    def _prompt_toolbar(self) -> AnyFormattedText:
        return self._toolbar.prompt_text(self._shell)

    def _cycle_mode(self, event: KeyPressEvent) -> None:
        """Shift+Tab, at the prompt or during a turn: the next permission mode (auto only with a sandbox); a
        turn's next tool call gets it (docs/safety.md)."""
        self._toolbar.permissions(self._shell).cycle()
        event.app.invalidate()

    def _expand(self, event: KeyPressEvent) -> None:
        """Ctrl-O, at the prompt or during a turn: the last tool output in full, above (like ``/expand``)."""
        if self._parts is not None:  # no shell yet, no tool output
            self._parts.expand()

    def _prompt_ctrl_c(self, buffer: Buffer, app: Application[str]) -> None:
        if buffer.text:
            buffer.reset()
            self._last_ctrl_c = None
            return
        now = time.monotonic()
        if self._last_ctrl_c is not None and now - self._last_ctrl_c <= DOUBLE_CTRL_C_WINDOW:
            if app.future is not None and not app.future.done():
                app.exit(exception=EOFError())
            return
        self._last_ctrl_c = now
        self.sink.write(self.shell.renderer.line(EXIT_HINT) if self._shell is not None else EXIT_HINT + "\n")

    # --- the live view during a turn ---------------------------------------------------------------

    def _turn_toolbar(self) -> AnyFormattedText:
        activity = self.shell.display.activity.text(time.monotonic())
        return [("class:bottom-toolbar", self._toolbar.turn_text(self._shell, activity, self._turn.hint()))]

    def _cancel_turn(self) -> None:
        """Cancel the running turn; until it has ended (a subagent's child is torn down first) the toolbar says so."""
        self._turn.cancelling = True
        self.shell.cancel_turn()
        if self._view is not None:
            self._view.invalidate()

    def _live(self) -> AnyFormattedText:
        return ANSI(self.sink.live_text() + terminal_text(self._turn.question or ""))

    def _build_view(self) -> Application[None]:
        keys = KeyBindings()

        @keys.add("<any>")
        def _type_ahead(event: KeyPressEvent) -> None:
            # Text typed during a turn is no prompt yet: it waits for the next one (special keys do nothing).
            key = event.key_sequence[0].key if len(event.key_sequence) == 1 else None
            if isinstance(key, str) and not isinstance(key, Keys) and key.isprintable():
                self._keep_typed(event.data)

        @keys.add(Keys.BracketedPaste)
        def _paste(event: KeyPressEvent) -> None:
            self._keep_typed(event.data.replace("\r\n", "\n").replace("\r", "\n"))

        @keys.add("backspace")
        def _erase(event: KeyPressEvent) -> None:
            self._turn.erase_typed()
            event.app.invalidate()

        @keys.add("c-c")
        def _cancel(event: KeyPressEvent) -> None:
            self._cancel_turn()

        @keys.add("c-d")
        def _leave(event: KeyPressEvent) -> None:
            if self._turn.toggle_leaving():
                event.app.invalidate()

        keys.add("c-o")(self._expand)
        keys.add(Keys.BackTab)(self._cycle_mode)

        asking = Condition(lambda: self._turn.question is not None)
        for key, answer in (("y", "y"), ("Y", "y"), ("n", "n"), ("N", "n"), ("a", "a"), ("A", "a"),
                            ("enter", "n"), ("escape", "n")):
            keys.add(key, filter=asking)(self._answer_handler(answer))
        keys.add("v", filter=asking)(self._view_command)
        keys.add("V", filter=asking)(self._view_command)
        keys.add("enter", filter=~asking)(lambda event: self._keep_typed("\n"))

        live = Window(FormattedTextControl(self._live, show_cursor=False), wrap_lines=True,
                      dont_extend_height=True, always_hide_cursor=True)
        has_live = Condition(lambda: bool(self.sink.partial or self._turn.question))
        toolbar = Window(FormattedTextControl(self._turn_toolbar, show_cursor=False),
                         height=lambda: 2 if self._toolbar.plan_line(self._shell, NARROW_COLUMNS) else 1,
                         style="class:bottom-toolbar", always_hide_cursor=True)
        return Application(
            layout=Layout(HSplit([ConditionalContainer(live, filter=has_live), toolbar])),
            key_bindings=keys,
            full_screen=False,
            erase_when_done=True,
            refresh_interval=1.0,
            min_redraw_interval=0.03,
            mouse_support=False,
        )

    def _keep_typed(self, text: str) -> None:
        if self._turn.keep_typed(text) and self._view is not None:
            self._view.invalidate()

    def _view_command(self, event: KeyPressEvent) -> None:
        """``v``: the whole command or diff, printed above the question; only then do ``y`` and ``a`` count."""
        view = self._turn.view()
        if view is not None:
            self.sink.write(self.shell.renderer.block(view))

    def _answer_handler(self, answer: str) -> Callable[[KeyPressEvent], None]:
        def handle(event: KeyPressEvent) -> None:
            self._turn.answer(answer)

        return handle

    @contextlib.asynccontextmanager
    async def _turn_view(self) -> AsyncIterator[None]:
        view = self._build_view()
        started = anyio.Event()

        async def run_view() -> None:
            try:
                await view.run_async(pre_run=started.set, handle_sigint=False)
            except Exception:
                pass  # no live view (an odd terminal): the turn still runs, output goes straight out
            finally:
                started.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run_view)
            await started.wait()
            self._view = self.sink.view = view
            self._turn.cancelling = self._turn.leaving = False
            try:
                yield
            finally:
                with anyio.CancelScope(shield=True):
                    await self.sink.settle()
                    self.sink.view = self._view = None
                    if view.is_running and view.future is not None and not view.future.done():
                        view.exit()
                    self.shell.prefill += self._turn.take_typed()
        with anyio.CancelScope(shield=True):
            await self.sink.drain()

    async def _ask_approval(self, request: str | EditRequest | McpCallRequest) -> ToolApproval | None:
        """The approver of run_shell (a command), the edit tools (an EditRequest) and MCP tools (an
        McpCallRequest: server, tool, the whole arguments JSON): inline, (y / n / a)."""
        view = self._view
        if view is None or not view.is_running:
            return None
        await self.sink.settle()  # every line before the question is on the screen above it
        question, answered = await self._turn.ask(self._approval_for(request), view.invalidate)
        self.sink.write(self.shell.renderer.line(question + approval_answer(answered)))
        return _ANSWERS.get(answered or "")

    def _approval_for(self, request: str | EditRequest | McpCallRequest) -> Approval:
        """The question ``request`` asks, sized to the terminal (repl/approvals.py)."""
        size = self._output.get_size()
        return question_for(request, rows=size.rows, cols=size.columns, color=self.shell.renderer.color)


def _import_agent_modules() -> None:
    """What the first prompt does without, imported in a worker thread once it is drawn (``_build_agent``)."""
    import anyio._backends._asyncio  # noqa: F401  (anyio's backend, loaded by the agent's first use)

    import dsh.agent_loop.build  # noqa: F401  (the agent, its tools, the session log, the client)


async def run_interactive(options: LaunchOptions, config: Config, env: dict[str, str]) -> int:
    """The REPL. A new session's first prompt takes keys first, the shell opened behind it (``run_opening``), and the
    agent built behind that (``_build_agent``); when something comes before the prompt (hints, the demo's endpoint, a
    resumed session's recap), the shell is opened first."""
    app = InteractiveApp(history=history_path(env), config=config)
    async with contextlib.AsyncExitStack() as stack:
        early = options.first_prompt  # dsh.repl.launch drew it, or not

        async def open_shell() -> Shell:
            return await _open_shell(stack, options, config, env, app,
                                     session_id=early.session_id if early is not None else None)

        if early is not None:
            return await app.run_opening(open_shell, first_prompt=early)
        shell = await open_shell()
        if options.resume is not None:
            shell.report_resumed()
        return await app.run(shell, banner=shell.endpoint.label.banner(shell.session))
    return 1  # pragma: no cover - the exit stack does not swallow


async def _open_shell(stack: contextlib.AsyncExitStack, options: LaunchOptions, config: Config, env: dict[str, str],
                      app: InteractiveApp, *, session_id: str | None) -> Shell:
    """A started shell on ``app`` over the run's endpoint, held open by ``stack``, its agent built behind the prompt
    (dsh.repl.shell, imported now if a worker thread has not done it yet); StartupError if not."""
    open_shell: Callable[..., Awaitable[Shell]] = entry("dsh.repl.shell", "open_shell")
    color: Callable[..., bool] = entry("dsh.repl.shell", "color")
    return await open_shell(stack, options, config, env, app, color=color(env, sys.stdout), show_usage=True,
                            defer_agent=True, session_id=session_id)
