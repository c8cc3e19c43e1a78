"""The prompt's parts that need the shell, added to it once the shell is open (repl/app.py: behind the first prompt).

``/command`` completion (:class:`SlashCompleter`) merged with ``@`` mentions, the pasted-image key
(repl/prompt_input.py), Ctrl-O's output in full, and what each prompt takes from the shell: the editing mode
``/vim`` chose, and the text typed during the turn. The first prompt reads keys without these
(repl/prompt_line.py): this module imports the commands, and through them the session's modules.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.key_binding import KeyBindings

from dsh.agent_loop.path_index import PathIndex
from dsh.repl import commands, custom_commands
from dsh.repl.prompt_input import add_paste_key, editing_mode, prompt_completer
from dsh.repl.sanitize import sanitize
from dsh.repl.shell import Shell

__all__ = ["PromptParts", "SlashCompleter"]


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


class PromptParts:
    """What the prompt gains from ``shell``: its keys added to ``keys`` (the prompt's own bindings), its completer
    (:attr:`completer`, set on the prompt by the app), the tree's index for ``@`` (listed once the agent is built)."""

    def __init__(self, shell: Shell, keys: KeyBindings) -> None:
        self.shell = shell
        add_paste_key(keys, shell.pasted, Path(shell.session.cwd))  # a pasted image path (repl/prompt_input.py)
        self.paths = PathIndex(Path(shell.session.cwd))
        self.completer = prompt_completer(SlashCompleter(shell), self.paths)

    def before_prompt(self, prompt: PromptSession[str]) -> str:
        """Before each prompt: the editing mode (``/vim`` switches from the next prompt); returns the text the
        prompt starts with (what was typed during the turn), taken from the shell."""
        prompt.editing_mode = editing_mode(self.shell.vi_mode)
        default, self.shell.prefill = self.shell.prefill, ""
        return default

    def expand(self) -> None:
        """Ctrl-O, at the prompt or during a turn: the last tool output in full, above (like ``/expand``)."""
        self.shell.say(commands.expanded_output(self.shell.session.last_tool_result))

    def agent_built(self) -> None:
        """Once the agent is built behind the prompt: a custom command's skipped line, if any, now; then the tree
        listed for ``@`` completion in a worker thread (not beside the first keys: a typed ``@`` lists it at once
        anyway)."""
        custom_commands.table(self.shell, commands.COMMANDS)
        self.paths.start()
