"""The prompt between turns, as the first prompt needs it: its history, its keys and its toolbar.

The first prompt takes keys before the session's modules are imported (docs/architecture.md, "Start-up and lazy
imports"), so what this module builds needs only the config, and it imports nothing heavier than prompt_toolkit.
The parts that need the shell (``/command`` and ``@`` completion, the pasted-image key, Ctrl-O's output) are
added once the shell is open (repl/prompt_parts.py). Until then the toolbar says what the config says,
spelled as the session will spell it (the model, the endpoint without credentials, the permission mode: Shift+Tab
cycles it here, and the session takes it over), with no context fill and no plan yet.
"""

from __future__ import annotations

import contextlib
import os
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from prompt_toolkit import PromptSession
from prompt_toolkit.formatted_text import AnyFormattedText
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.keys import Keys

from dsh.agent_loop.permissions import Mode, Permissions
from dsh.agent_loop.plan import current_plan, plan_progress
from dsh.llm.redact import redact_url
from dsh.repl.config import Config
from dsh.repl.lazy import entry
from dsh.repl.sanitize import sanitize

if TYPE_CHECKING:
    from dsh.repl.shell import Shell

__all__ = ["NARROW_COLUMNS", "SafeHistory", "Toolbar", "fit_width", "new_prompt", "prompt_keys"]

# At this width or less the toolbar puts the live status first: what is cut is the static part.
NARROW_COLUMNS = 80
_ELLIPSIS = "…"
KeyHandler = Callable[[KeyPressEvent], None]


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


def prompt_keys(*, ctrl_c: KeyHandler, expand: KeyHandler, cycle_mode: KeyHandler) -> KeyBindings:
    """The prompt's own keys: Ctrl-C, Enter (a trailing backslash continues the line), Esc Enter (a newline), Ctrl-G
    (the prompt in the editor), Ctrl-O (the last tool output in full), Shift+Tab (the next permission mode). The
    pasted-image key needs the shell: added to the same bindings once it is open (repl/prompt_parts.py)."""
    keys = KeyBindings()
    keys.add("c-c")(ctrl_c)

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

    @keys.add("c-g")
    def _editor(event: KeyPressEvent) -> None:
        # $VISUAL/$EDITOR (Ctrl-X Ctrl-E too: enable_open_in_editor); what the editor saves comes back to the prompt,
        # to be read over and sent with Enter.
        event.current_buffer.open_in_editor(validate_and_handle=False)

    keys.add("c-o")(expand)
    keys.add(Keys.BackTab)(cycle_mode)
    return keys


def new_prompt(history: Path, keys: KeyBindings, *, vi_mode: bool,
               toolbar: Callable[[], AnyFormattedText]) -> PromptSession[str]:
    """The prompt session every line is read with; its completer is set once the shell is open."""
    return PromptSession(
        history=SafeHistory(history),
        complete_while_typing=True,
        enable_open_in_editor=True,
        vi_mode=vi_mode,
        key_bindings=keys,
        multiline=True,
        prompt_continuation=lambda width, line_number, soft_wrap: ". ".rjust(width),
        bottom_toolbar=toolbar,
        enable_history_search=False,
        erase_when_done=False,
    )


def _cells(char: str) -> int:
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def fit_width(text: str, width: int) -> str:
    """``text`` cut to ``width`` terminal cells, ``…`` marking the cut (a toolbar line never wraps)."""
    if width <= 0:
        return ""
    if len(text) <= width and text.isascii():
        return text
    cells = [_cells(char) for char in text]
    if sum(cells) <= width:
        return text
    used, end = 0, 0
    while end < len(text) and used + cells[end] <= width - 1:
        used += cells[end]
        end += 1
    return text[:end] + _ELLIPSIS


class Toolbar:
    """The toolbar's text under the prompt and under a turn's live view, cut to ``columns()``: the model, the
    endpoint, the permission mode, the context fill, the endpoint's own words; the plan on a line of its own.

    Each method takes the shell, None while it is not open yet: then the fields come from ``config``.
    """

    def __init__(self, config: Config | None, columns: Callable[[], int]) -> None:
        self._config = config
        self.columns = columns
        # The mode while the shell is not open (Shift+Tab may change it meanwhile): the session takes it over.
        self.early_permissions = None if config is None else Permissions(
            Mode(config.permission_mode), auto_allowed=config.sandbox is not None)

    def permissions(self, shell: Shell | None) -> Permissions:
        if shell is not None:
            return shell.session.permissions
        assert self.early_permissions is not None, "a config, or a shell"
        return self.early_permissions

    def base(self, shell: Shell | None, *, mode: bool = True) -> str:
        if shell is None:
            assert self._config is not None, "a config, or a shell"
            # What Session.model and Session.endpoint say before the client is built.
            text = f" {self._config.model} · {redact_url(self._config.base_url.rstrip('/'))}"
        else:
            text = f" {shell.session.model} · {shell.session.endpoint}"
        text += f" · {self.mode_text(shell)}" if mode else ""
        if shell is not None:
            context = self._context(shell)
            text += f" · {context}" if context is not None else ""
            text += shell.endpoint.label.toolbar()
        return sanitize(text)  # prompt_toolkit draws the toolbar: the sink's sanitizer, applied here

    @staticmethod
    def _context(shell: Shell) -> str | None:
        """``context 18%``, or None while the fill is not known."""
        # The usage module imports the event vocabulary: it comes with the shell's modules, in before any shell is.
        context_text: Callable[..., str | None] = entry("dsh.repl.usage", "context_text")
        return context_text(shell.session.usage, shell.config.models)

    def mode_text(self, shell: Shell | None) -> str:
        """The permission mode, always on the toolbar (docs/safety.md)."""
        return f"mode: {self.permissions(shell).mode}"

    def plan_line(self, shell: Shell | None, columns: int) -> str:
        """``plan 2/5 ▸ Running the tests`` on a line of its own under the toolbar while the plan has open items."""
        plan = current_plan(shell.session) if shell is not None else None
        progress = plan_progress(plan) if plan is not None else None
        return "\n" + fit_width(sanitize(f" {progress}"), columns) if progress else ""

    def prompt_text(self, shell: Shell | None) -> str:
        columns = self.columns()
        return fit_width(self.base(shell) + " · /help", columns) + self.plan_line(shell, columns)

    def turn_text(self, shell: Shell | None, activity: str, hint: str) -> str:
        """Under the live view: the fields, what the turn is doing and the hint; the live part first when the
        line would be cut, so that what a narrow terminal (or a long endpoint) cuts is the static part; the mode,
        which says what the next tool call may do, with the live part."""
        columns = self.columns()
        text = self.base(shell) + (f" · {activity}" if activity else "") + f" · {hint}"
        if columns <= NARROW_COLUMNS or fit_width(text, columns) != text:
            static = self.base(shell, mode=False).strip()
            text = " " + " · ".join(part for part in (activity, hint, self.mode_text(shell), static) if part)
        return fit_width(sanitize(text), columns) + self.plan_line(shell, columns)
