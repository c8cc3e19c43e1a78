"""What the turn's live view holds between keys: the text typed ahead, whether Ctrl-C is cancelling the turn,
whether Ctrl-D asked dsh to exit once it ends, and the inline approval question (asked, maybe viewed with
``v``, answered).

Its own module because it is the state machine under the live view's keys and toolbar (repl/app.py binds
the keys and draws the view); it knows no terminal, so each transition reads plainly here. The questions
themselves are built in repl/approvals.py; docs/safety.md says what each answer allows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from dsh.repl.approvals import Approval

__all__ = ["CANCELLING", "LEAVING", "TYPEAHEAD_LIMIT", "LiveViewState"]

CANCELLING = "cancelling…"  # the turn toolbar's hint from a Ctrl-C until the turn has ended
LEAVING = "Ctrl-D: dsh exits when this turn ends (Ctrl-D again to stay)"  # from a Ctrl-D during a turn
TYPEAHEAD_LIMIT = 64 * 1024  # characters kept from typing during a turn; a runaway paste stops here


class LiveViewState:
    """The live view's state during a turn: the app's keys change it, its toolbar and live line show it."""

    def __init__(self) -> None:
        self.typed = ""  # typed during a turn: the next prompt starts with it
        self.cancelling = False  # Ctrl-C was pressed during this turn: the toolbar says so until it ends
        self.leaving = False  # Ctrl-D was pressed during this turn, nothing typed ahead: dsh exits when it ends
        self.question: str | None = None  # the approval question on the live view, while one is asked
        self._approval: Approval | None = None
        self._viewed = False
        self._answer: str | None = None
        self._answered: anyio.Event | None = None

    # --- typed ahead --------------------------------------------------------------------------------------

    def keep_typed(self, text: str) -> bool:
        """Keeps ``text`` for the next prompt, up to :data:`TYPEAHEAD_LIMIT`; whether anything was kept."""
        room = TYPEAHEAD_LIMIT - len(self.typed)
        if room > 0 and text:
            self.typed += text[:room]
            return True
        return False

    def toggle_leaving(self) -> bool:
        """Ctrl-D: with nothing typed ahead it is the end of input, as at an empty prompt (dsh exits once the turn
        has ended); pressed again, dsh stays. With text typed ahead it does nothing. Whether anything changed."""
        if self.typed:
            return False
        self.leaving = not self.leaving
        return True

    def erase_typed(self) -> None:
        self.typed = self.typed[:-1]

    def take_typed(self) -> str:
        """What was typed ahead, handed to the next prompt (and no longer kept here)."""
        typed, self.typed = self.typed, ""
        return typed

    # --- the toolbar's hint --------------------------------------------------------------------------------

    def hint(self) -> str:
        """What the keys do now: cancel (or that a cancel is under way), or answer the question."""
        hint = CANCELLING if self.cancelling else "Ctrl-C cancels"
        if self.typed:
            hint += f" · typed ahead: {len(self.typed)} chars, kept for the next prompt"
        if self.leaving:
            hint += f" · {LEAVING}"
        if self.question is not None:
            approval = self._approval
            hint = f"v views the {approval.noun} · n denies" if approval and self._must_view() else self._answers()
        return hint

    def _must_view(self) -> bool:
        return self._approval is not None and self._approval.must_view and not self._viewed

    def _answers(self) -> str:
        return "y / n / a" if self._approval is None or self._approval.always else "y / n"

    # --- the approval question -------------------------------------------------------------------------------

    async def ask(self, approval: Approval, shown: Callable[[], None]) -> tuple[str, str | None]:
        """Puts ``approval``'s question up (``shown`` redraws the view) and waits for a key that counts:
        ``(the question as it ended, the key's answer: "y", "n" or "a")``."""
        self._answer, self._answered = None, anyio.Event()
        self._approval = approval
        self._viewed = False
        self.question = approval.question
        shown()
        try:
            await self._answered.wait()
        finally:
            question, self.question = self.question or "", None  # the viewed question, once viewed
            answered, self._answered = self._answer, None
            self._approval = None
        return question, answered

    def view(self) -> str | None:
        """``v``: the whole command or diff to print above the question (None: nothing to view); only then do
        ``y`` and ``a`` count."""
        approval = self._approval
        if approval is None or not approval.must_view or self._viewed or self._answered is None:
            return None
        self._viewed = True
        self.question = approval.viewed_question
        return approval.view

    def answer(self, answer: str) -> None:
        """A key of the question pressed (``y``, ``n`` or ``a``): the answer, if that key counts now."""
        if answer in ("y", "a") and self._must_view():
            return  # not shown yet: only v (view) or n (deny) count
        if answer == "a" and self._approval is not None and not self._approval.always:
            return  # asked every time (a git directory): "always" is not offered
        if self._answered is not None and self._answer is None:
            self._answer = answer
            self._answered.set()
