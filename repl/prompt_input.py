"""What the prompt adds to typing once the shell is open: ``@`` completing the tree's paths, vi key bindings and a
pasted image path (docs/prompt.md); the editor's keys (Ctrl-G, Ctrl-X Ctrl-E) are the prompt's own, from its first
key on (repl/prompt_line.py).

Imported with repl/prompt_parts.py, behind the first prompt: the tree is listed in a worker thread once the agent is
built, or at the first ``@`` if that comes sooner (agent_loop/path_index.py), and each completion runs in a thread
of its own, so a slow match never holds a key back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from prompt_toolkit.completion import CompleteEvent, Completer, Completion, ThreadedCompleter, merge_completers
from prompt_toolkit.document import Document
from prompt_toolkit.enums import EditingMode
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.keys import Keys

from dsh.agent_loop.mentions import MENTION
from dsh.agent_loop.path_index import PathIndex
from dsh.repl.pasted_images import PastedImages
from dsh.repl.sanitize import sanitize
from dsh.repl.usage import compact_count

__all__ = ["MentionCompleter", "add_paste_key", "editing_mode", "prompt_completer"]

FIRST_LISTING_WAIT = 5.0  # seconds the first completion waits for the tree's listing (a completer thread)
# The mention being typed: `@` at the start or after whitespace, up to the cursor (agent_loop/mentions.py's rule).
_TYPING = re.compile(r"(?<!\S)@([A-Za-z0-9_./+-]*)\Z")


class MentionCompleter(Completer):
    """Completes ``@path`` from the tree's files and folders, fuzzy, best first, each with its size in tokens."""

    def __init__(self, index: PathIndex) -> None:
        self.index = index

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterable[Completion]:
        typing = _TYPING.search(document.text_before_cursor)
        if typing is None:
            return
        self.index.start()  # the first listing, or a new one when this one is old (behind this completion)
        if not self.index.listed:  # the first @ of the session: this thread waits for the listing, keys do not
            self.index.wait(FIRST_LISTING_WAIT)
        query = typing.group(1)
        for path in self.index.match(query):
            if MENTION.fullmatch("@" + path) is None:
                continue  # a name the mention rule cannot spell (a space, a quote ...): not offered
            tokens = self.index.tokens(path)
            meta = "folder" if path.endswith("/") else "" if tokens is None else f"≈ {compact_count(tokens)} tokens"
            # prompt_toolkit draws the menu itself: the sink's sanitizer, applied here.
            yield Completion(path, start_position=-len(query), display=sanitize(path), display_meta=meta)


def prompt_completer(slash: Completer, index: PathIndex) -> Completer:
    """The prompt's completer: ``/commands`` as they were, and ``@`` mentions matched in a thread."""
    return merge_completers([slash, ThreadedCompleter(MentionCompleter(index))])


def add_paste_key(keys: KeyBindings, pasted: PastedImages, cwd: Path) -> None:
    """A paste of one image file's path is ``[image N: NAME]``, the image sent with the prompt
    (repl/pasted_images.py); any other paste is inserted as prompt_toolkit's own binding would."""

    @keys.add(Keys.BracketedPaste)
    def _paste(event: KeyPressEvent) -> None:
        text = event.data.replace("\r\n", "\n").replace("\r", "\n")
        event.current_buffer.insert_text(pasted.paste(text, cwd))


def editing_mode(vi: bool) -> EditingMode:
    return EditingMode.VI if vi else EditingMode.EMACS
