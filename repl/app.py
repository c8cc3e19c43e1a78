"""The interactive REPL: a prompt_toolkit prompt between turns, a small live view during a turn.

Between turns ``PromptSession.prompt_async`` reads a line (history, completion, multiline, the
toolbar). While a turn runs a second, tiny application owns the terminal: it shows the line that
is still streaming and the toolbar (``waiting for first token 12s · keep-alive 2s ago``), binds
Ctrl-C to cancel the turn and asks shell-command approvals inline. Complete lines are written
above it, raw (erasing the view, writing, drawing it again); the partial line lives in the view until its newline
arrives, so the view is always drawn from column 0 and nothing is ever glued or overdrawn.

Outside any application (the short gaps between them) the terminal is in cooked mode and Ctrl-C
is a SIGINT, which a signal receiver turns into the same actions.

This module is the app: the prompt (history, completion, keys, toolbar), the live view and the loop. What
writes to the terminal is repl/terminal_sink.py; what the live view holds between keys, repl/live_view_state.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from prompt_toolkit import PromptSession
from prompt_toolkit.application import Application
from prompt_toolkit.application.current import get_app_session
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.filters import Condition
from prompt_toolkit.formatted_text import ANSI, AnyFormattedText
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.keys import Keys
from prompt_toolkit.layout import ConditionalContainer, HSplit, Layout, Window
from prompt_toolkit.layout.controls import FormattedTextControl
from prompt_toolkit.patch_stdout import patch_stdout

from dsh.agent_loop.path_index import PathIndex
from dsh.agent_loop.plan import current_plan, plan_progress
from dsh.llm import unwrap_group
from dsh.repl import commands, custom_commands
from dsh.repl.activity import fit_width
from dsh.repl.approvals import Approval, approval_answer, question_for
from dsh.repl.config import Config, history_path
from dsh.repl.first_prompt import ENDING_SIGNALS, PROMPT, ending_status, typed_ahead
from dsh.repl.live_view_state import LiveViewState
from dsh.repl.options import DrawnPrompt, LaunchOptions
from dsh.repl.prompt_input import add_editor_keys, add_paste_key, editing_mode, prompt_completer
from dsh.repl.sanitize import sanitize
from dsh.repl.shell import Shell, StartupError, color, open_shell
from dsh.repl.styles import terminal_text
from dsh.repl.terminal_sink import TerminalSink
from dsh.repl.usage import context_text

if TYPE_CHECKING:
    from dsh.agent_loop.tools.edits import EditRequest
    from dsh.agent_loop.tools.registry import Approval as ToolApproval
    from dsh.agent_loop.tools.registry import McpCallRequest

__all__ = ["InteractiveApp", "SafeHistory", "SlashCompleter", "run_interactive"]

DOUBLE_CTRL_C_WINDOW = 2.0
_SIGNALS = (signal.SIGINT, *ENDING_SIGNALS)  # a quit or hangup by kill too: raw mode makes Ctrl-\ a key
_WAKE = "\x00wake"  # what the prompt returns when a background job's notice wakes the idle owner
EXIT_HINT = "(press Ctrl-C again to exit, or Ctrl-D)"
_ANSWERS: dict[str, ToolApproval] = {"y": "yes", "n": "no", "a": "always"}  # an approval key to its answer
# At this width or less the toolbar puts the live status first: what is cut is the static part.
NARROW_COLUMNS = 80


class SafeHistory(FileHistory):
    """Persistent history that never stores a line shaped like a secret (the guard would refuse it)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not path.exists():
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        super().__init__(str(path))

    def store_string(self, string: str) -> None:
        from dsh.agent_loop.guard import secret_shape  # with the agent's tools: not before the first prompt

        if secret_shape(string) is None:
            with contextlib.suppress(OSError):
                super().store_string(string)


class SlashCompleter(Completer):
    """Completes ``/commands``, and the argument of ``/scenario`` and ``/resume``."""

    def __init__(self, shell: Shell) -> None:
        self.shell = shell

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterable[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/") or "\n" in text or text.startswith("//"):
            return
        name, space, arg = text[1:].partition(" ")
        if not space:
            for command in commands.COMMANDS.values():
                if command.demo_only and self.shell.endpoint.controls is None:
                    continue
                if command.name.startswith(name.lower()):
                    yield Completion("/" + command.name, start_position=-len(text), display_meta=command.summary)
            for custom, meta in custom_commands.completions(self.shell, commands.COMMANDS, name):
                yield Completion("/" + custom, start_position=-len(text), display_meta=sanitize(meta))
            return
        for value, meta in self._arguments(name.lower()):
            if value.startswith(arg):
                # prompt_toolkit draws the menu itself: session ids and titles get the sink's sanitizer.
                yield Completion(value, start_position=-len(arg), display=sanitize(value), display_meta=sanitize(meta))

    def _arguments(self, name: str) -> list[tuple[str, str]]:
        controls = self.shell.endpoint.controls
        if name == "scenario" and controls is not None:
            return controls.scenarios()
        if name == "skill":
            return custom_commands.skill_names(self.shell)
        if name == "resume":
            session = self.shell.session
            return [("last", "this project's latest session")] + [
                (info.id, info.title) for info in reversed(session.saved_sessions(session.project))
            ]
        return []


class InteractiveApp:
    """The terminal front end: prompt, turns, keys. ``run(shell)`` returns the exit status.

    It is the :class:`~dsh.repl.frontend.FrontEnd` its shell writes to: text goes through a
    :class:`TerminalSink`, each turn runs under the live view, approvals are asked inline.
    """

    rewrites_partial = True  # the sink keeps an unfinished line aside
    can_approve = True

    def __init__(self, *, history: Path) -> None:
        self.history_path = history
        self._shell: Shell | None = None  # given to run()
        self._output = get_app_session().output  # before patch_stdout replaces sys.stdout
        self.sink = TerminalSink(self._output)
        self._session: PromptSession[str] | None = None
        self._view: Application[None] | None = None
        self._last_ctrl_c: float | None = None
        self._exit_status: int | None = None
        self._turn = LiveViewState()  # what the live view holds between keys: typed ahead, cancelling, a question
        self._startup_error: StartupError | None = None
        self._first_prompt: DrawnPrompt | None = None  # drawn by start-up, taken over by the first prompt
        self._drawn = asyncio.Event()  # this prompt is on the screen: the agent's build may start
        self._servers_opened = False
        self._paths: PathIndex | None = None  # the tree's files for @ completion, listed behind the first prompt

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
        """The REPL until exit; ``first_prompt``: the banner and prompt start-up already drew, to take over."""
        self._shell = shell
        self._first_prompt = first_prompt
        # Plain asyncio (prompt_toolkit's loop) until the first prompt is drawn: anyio's backend is
        # loaded with the agent, just after (see _build_agent).
        loop = asyncio.get_running_loop()
        for signum in _SIGNALS:
            loop.add_signal_handler(signum, self._on_signal, signum)
        try:
            with patch_stdout(raw=True):
                return await self._loop(banner)
        finally:
            for signum in _SIGNALS:
                loop.remove_signal_handler(signum)

    async def _loop(self, banner: str) -> int:
        self.sink.prompt_toolkit_ran = True  # from the banner on (patch_stdout is running)
        self._session = self._build_prompt()
        early = self._first_prompt
        if early is None or early.banner != banner:
            if early is not None:
                early.abandon()  # not what start-up promised (never expected): the real banner follows
            self.shell.say(banner)
        while True:
            line = await self._read_line()
            if self._startup_error is not None:
                raise self._startup_error  # the CLI says why, once the prompt is gone
            if line is None:
                break
            if line != _WAKE:
                await self.shell.handle_line(line)
            # Notices that arrived while idle (or during a command) get a turn of their own.
            await self.shell.deliver_notices()
            if self.shell.exit_code is not None:
                return self.shell.exit_code
            if self._exit_status is not None:
                break
        await self.sink.drain()
        return self._exit_status or 0

    async def _read_line(self) -> str | None:
        assert self._session is not None
        if self._exit_status is not None:
            return None  # an ending signal came before this prompt ran
        default, self.shell.prefill = self.shell.prefill, ""
        self._session.editing_mode = editing_mode(self.shell.vi_mode)  # /vim switches from the next prompt
        prompt = self._session.prompt_async(PROMPT, default=default, handle_sigint=False, pre_run=self._pre_run)
        try:
            async with asyncio.TaskGroup() as group:  # asyncio's: anyio's backend comes with the agent, behind it
                return await self._prompt_beside_startup(group, prompt)
        except BaseExceptionGroup as failures:
            raise unwrap_group(failures) from None  # one task's failure, as the loop would have seen it

    # --- what start-up deferred, behind the first prompt ----------------------------------------------

    def _pre_run(self) -> None:
        """Runs just before prompt_toolkit reads the typeahead, enters raw mode and draws the prompt."""
        if self._first_prompt is not None:
            self._first_prompt.take_over()  # echo back on before raw mode saves it; its prompt is drawn over
        self._drawn.set()  # the prompt is drawn before the awaiting task runs: the agent's build starts then
        if self._exit_status is not None:
            self._exit_prompt()  # an ending signal came while the prompt was being set up

    async def _prompt_beside_startup(self, group: asyncio.TaskGroup, prompt: Coroutine[Any, Any, str]) -> str | None:
        """The prompt's line (None: the input ended), read in ``group`` beside what start-up left for behind it:
        while the session has no agent, its modules' import and its build, once the prompt is drawn; the first
        time, the session's MCP servers opened, once those modules are in or the line is, from this task: the one
        that closes them with the session (they never delay the prompt, docs/mcp.md). The line's end cancels an
        unfinished build: the line's turn builds the agent itself (Session.run_turn)."""
        self._drawn = asyncio.Event()
        imported_or_read = asyncio.Event()
        reading = group.create_task(self._line(prompt, imported_or_read))
        building = group.create_task(self._build_agent(imported_or_read)) if self.shell.session.agent is None else None
        if not self._servers_opened:
            self._servers_opened = True
            # Not before the agent's modules are in (the manager is one): importing it here meanwhile would wait
            # for the worker thread's import lock with the loop, and keys typed at the prompt with it.
            await imported_or_read.wait()
            try:
                await self.shell.session.open_mcp()
            except StartupError as exc:
                self._startup_error = exc
                self._exit_prompt()
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

    async def _build_agent(self, imported: asyncio.Event) -> None:
        """Once the prompt is drawn: the agent's modules imported, then the agent built; a failure ends the prompt
        and the loop raises it (the CLI says why in one line)."""
        await self._drawn.wait()
        await self._typed_ahead_drawn()  # the import holds the interpreter: ~15 ms more until those keys show
        try:
            # Its modules take longer to import than the prompt took to draw: in a worker thread, so that keys
            # typed at the prompt meanwhile are drawn as they come (docs/architecture.md, "Start-up and lazy
            # imports").
            await asyncio.to_thread(_import_agent_modules)
        except Exception:
            pass  # a broken install: the build below raises it again, as a StartupError
        finally:
            imported.set()
        try:
            self.shell.session.ensure_agent()
            custom_commands.table(self.shell, commands.COMMANDS)  # a custom command's skipped line, if any, now
        except StartupError as exc:
            self._startup_error = exc
            self._exit_prompt()
            return
        finally:
            gc.enable()  # start-up is over once the agent is in (dsh.repl.launch paused the collector for it)
        if self._paths is not None:  # the tree listed for @ completion, in a worker thread, once the agent is in
            self._paths.start()  # (not beside the first keys: a typed @ lists it at once anyway)
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
        if signum in ENDING_SIGNALS:  # the turn ends, the prompt exits, prompt_toolkit restores the terminal
            self._exit_status = ending_status(signum)
            self.shell.cancel_turn()
            self._exit_prompt()
        elif self.shell.session.turn_running:
            self._cancel_turn()
        elif self._session is not None and self._session.app.is_running:
            self._prompt_ctrl_c(self._session.app.current_buffer, self._session.app)

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

    # --- the prompt ----------------------------------------------------------------------------------

    def _toolbar_base(self, *, mode: bool = True) -> str:
        session = self.shell.session
        text = f" {session.model} · {session.endpoint}" + (f" · {self._mode_text()}" if mode else "")
        context = context_text(session.usage, self.shell.config.models)
        if context is not None:
            text += f" · {context}"
        text += self.shell.endpoint.label.toolbar()
        return sanitize(text)  # prompt_toolkit draws the toolbar: the sink's sanitizer, applied here

    def _mode_text(self) -> str:
        """The permission mode, always on the toolbar (docs/safety.md)."""
        return f"mode: {self.shell.session.permissions.mode}"

    def _cycle_mode(self, event: KeyPressEvent) -> None:
        """Shift+Tab, at the prompt or during a turn: the next permission mode (auto only with a sandbox); a
        turn's next tool call gets it (docs/safety.md)."""
        self.shell.session.permissions.cycle()
        event.app.invalidate()

    def _columns(self) -> int:
        try:
            return self._output.get_size().columns
        except OSError:
            return NARROW_COLUMNS

    def _plan_line(self, columns: int) -> str:
        """``plan 2/5 ▸ Running the tests`` on a line of its own under the toolbar while the plan has open items."""
        plan = current_plan(self.shell.session)
        progress = plan_progress(plan) if plan is not None else None
        return "\n" + fit_width(sanitize(f" {progress}"), columns) if progress else ""

    def _prompt_toolbar(self) -> AnyFormattedText:
        columns = self._columns()
        return fit_width(self._toolbar_base() + " · /help", columns) + self._plan_line(columns)

    def _build_prompt(self) -> PromptSession[str]:
        keys = KeyBindings()

        @keys.add("c-c")
        def _ctrl_c(event: KeyPressEvent) -> None:
            self._prompt_ctrl_c(event.current_buffer, event.app)

        @keys.add("enter")
        def _enter(event: KeyPressEvent) -> None:
            buffer = event.current_buffer
            document = buffer.document
            if document.is_cursor_at_the_end and document.text.endswith("\\"):
                buffer.delete_before_cursor(1)
                buffer.insert_text("\n")  # a trailing backslash continues the prompt
                return
            buffer.validate_and_handle()

        @keys.add("escape", "enter")
        def _newline(event: KeyPressEvent) -> None:
            event.current_buffer.insert_text("\n")

        keys.add("c-o")(self._expand)
        keys.add(Keys.BackTab)(self._cycle_mode)
        add_editor_keys(keys)  # Ctrl-G: the prompt in $VISUAL/$EDITOR (repl/prompt_input.py)
        add_paste_key(keys, self.shell.pasted, Path(self.shell.session.cwd))  # a pasted image path (same module)
        self._paths = PathIndex(Path(self.shell.session.cwd))

        return PromptSession(
            history=SafeHistory(self.history_path),
            completer=prompt_completer(SlashCompleter(self.shell), self._paths),
            complete_while_typing=True,
            enable_open_in_editor=True,
            vi_mode=self.shell.vi_mode,
            key_bindings=keys,
            multiline=True,
            prompt_continuation=lambda width, line_number, soft_wrap: ". ".rjust(width),
            bottom_toolbar=self._prompt_toolbar,
            enable_history_search=False,
            erase_when_done=False,
        )

    def _expand(self, event: KeyPressEvent) -> None:
        """Ctrl-O, at the prompt or during a turn: the last tool output in full, above (like ``/expand``)."""
        self.shell.say(commands.expanded_output(self.shell.session.last_tool_result))

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
        self.sink.write(self.shell.renderer.line(EXIT_HINT))

    # --- the live view during a turn ---------------------------------------------------------------

    def _turn_toolbar(self) -> AnyFormattedText:
        activity = self.shell.display.activity.text(time.monotonic())
        hint = self._turn.hint()
        base = self._toolbar_base()
        columns = self._columns()
        text = base + (f" · {activity}" if activity else "") + f" · {hint}"
        if columns <= NARROW_COLUMNS or fit_width(text, columns) != text:
            # The live part first, so what a narrow terminal (or a long endpoint) cuts is the static part; the
            # mode, which says what the next tool call may do, with the live part.
            static = self._toolbar_base(mode=False).strip()
            text = " " + " · ".join(part for part in (activity, hint, self._mode_text(), static) if part)
        return [("class:bottom-toolbar", fit_width(sanitize(text), columns) + self._plan_line(columns))]

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
                         height=lambda: 2 if self._plan_line(NARROW_COLUMNS) else 1,  # the plan's line
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
            self._turn.cancelling = False
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
    """The REPL: the first prompt is drawn first and the agent built behind it (see ``_build_agent``)."""
    app = InteractiveApp(history=history_path(env))
    async with contextlib.AsyncExitStack() as stack:
        early = options.first_prompt  # dsh.repl.launch drew it, or not
        shell = await open_shell(stack, options, config, env, app, color=color(env, sys.stdout), show_usage=True,
                                 defer_agent=True, session_id=early.session_id if early is not None else None)
        if options.resume is not None:
            shell.report_resumed()
        return await app.run(shell, banner=shell.endpoint.label.banner(shell.session), first_prompt=early)
    return 1  # pragma: no cover - the exit stack does not swallow
