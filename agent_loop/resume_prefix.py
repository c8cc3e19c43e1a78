"""The resume pass's fast read of a long log: what the cut to the model's window leaves out is skimmed, not parsed.

A log far longer than the conversation a resume keeps (twice the model's window, agent_loop/resume.py) is read in
two parts (docs/architecture.md, "The session log"). The *tail*, from a ``turn/start`` far enough before the end to
hold a multiple of the budget's characters of message text (by the share of text in the last bytes), is read
exactly as before. The *prefix* before it is skimmed: a line whose
head is a record's (``{"type":"...","seq":N,"time":``, as the log's writer puts it) is read by its type and the
few fields that count -- how many messages it adds to the conversation (:class:`MessageCount` follows
:class:`~dsh.agent_loop.conversation.Conversation`'s rules without building them), a tool call's id, a turn's
number, a request's usage and time for the recap's spend -- and its texts are never decoded. Any other line, or
a record of a rarer type (a compaction, a notice, a model or plan change), is parsed and reported as before.

The skim is checked, not trusted: the result is kept only if the cut falls inside the tail (so the prefix's
messages were all left out anyway, and counting them is all the conversation needs of them) and the tail holds
the recap's turns; otherwise the log is read again, with a longer tail (:meth:`PrefixSkim.accepted`). A line in
the prefix with a record's head is not checked to be JSON past the fields read: one with a broken body there is not
reported as unreadable, as the exact reader would.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsh.agent_loop.conversation import NOTICE_SOURCE
from dsh.agent_loop.events import (
    AssistantMessage,
    ContextCompacted,
    JobNotice,
    StepStart,
    ToolResult,
    TurnEnd,
    TurnStart,
    wire_reader,
)
from dsh.agent_loop.recap import KEEP, Recap
from dsh.agent_loop.session_read import Loaded, count_seq, parse_body_by_line
from dsh.llm import Usage
from dsh.llm import lines as line_reader
from dsh.llm.models import Prices
from dsh.llm.text import loads

__all__ = ["MessageCount", "PrefixSkim"]

_read_str, _read_opt_str = wire_reader("str"), wire_reader("str | None")
_read_calls = wire_reader("tuple[ToolCall, ...]")
_read_images = wire_reader("tuple[Image, ...] | None")

RecordBatch = Callable[[list[dict[str, Any]]], None]

# A record's head as the writer puts it (session_log.py): the type, then the seq as JSON writes an int.
_HEAD = re.compile(rb'\{"type":"([a-z/_]{1,40})","seq":([1-9][0-9]{0,17}),"time":')
_HEADS = re.compile(rb'\}\}\n' + _HEAD.pattern)  # a line's end and the next one's head (no line holds a newline)
_TURN = re.compile(rb'"[^"\\]*","data":\{"turn":(0|[1-9][0-9]{0,17}),"prompt":"')  # from the time on
# Each tool call's id as the writer puts it (ToolCall: id first, no escape in it; a quote inside a JSON string is
# escaped, so ``{"id":"`` opens a call).
_CALL_IDS = re.compile(rb'\{"id":"([^"\\]*)","name":"')
_TURN_START = b'\n{"type":"turn/start","seq":'
_COUNT = rb"([0-9]{1,18})"
_USAGE = re.compile(rb',"usage":\{"prompt_tokens":%s,"completion_tokens":%s,"total_tokens":%s,'
                    rb'"prompt_cache_hit_tokens":%s,"prompt_cache_miss_tokens":%s,"reasoning_tokens":%s\}\}\}\Z'
                    % ((_COUNT,) * 6))
assert Usage.__dataclass_fields__.keys() == {"prompt_tokens", "completion_tokens", "total_tokens",
                                             "prompt_cache_hit_tokens", "prompt_cache_miss_tokens", "reasoning_tokens"}
# A time as the writer puts it (UTC): its prices are those of its hour (llm/models.py: peak hours are whole hours).
_UTC_HOUR = re.compile(rb'"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}):[0-9]{2}:[0-9]{2}\.[0-9]{3}Z",')


class MessageCount:
    """How many messages the conversation holds after its head (system prompt, a compaction's summary), by
    :class:`~dsh.agent_loop.conversation.Conversation`'s rules, with none of them built; and what the next
    turn inherits: the queued notices and the last compaction's record."""

    def __init__(self) -> None:
        self.held = 0
        self.compaction: dict[str, Any] | None = None  # the data of the last ``context/compact``
        self.notices: list[str] = []
        self._mark: int | None = None
        self._prompt = False
        self._images = 0  # images tools returned this step (a user message at the next step)
        self._replied = False
        self._first_step = False
        self._calls: set[str] = set()
        self._turn_notices: list[str] = []

    def turn_start(self, source: str | None) -> None:
        self._mark, self._prompt, self._images, self._replied, self._first_step = self.held, True, 0, False, True
        self._calls = set()
        self._turn_notices = []
        if source == NOTICE_SOURCE:
            self._turn_notices, self.notices = self.notices, []

    def step_start(self) -> None:
        if not (self._first_step or self.notices or self._images):
            return  # a later step with nothing queued: the common case, nothing to add
        first, self._first_step = self._first_step, False
        self.held += len(self.notices)
        self._turn_notices.extend(self.notices)
        self.notices = []
        if first:
            self.held += self._prompt
        elif self._images:
            self.held += 1
            self._images = 0

    def reply(self, content: bool, call_ids: list[str]) -> None:
        if call_ids or content:
            self.held += 1
            self._replied = True
            self._calls = set(call_ids)

    def tool_result(self, call_id: str, images: int) -> None:
        if call_id in self._calls:
            self._calls.discard(call_id)
            self.held += 1
            self._images += images

    def turn_end(self) -> None:
        self.held += len(self._calls)
        self._calls = set()
        if self._mark is not None and not self._replied:
            self.held = self._mark
            self.notices[:0] = self._turn_notices
        self._mark, self._prompt, self._images = None, False, 0
        self._turn_notices = []

    def apply(self, kind: str, data: dict[str, Any]) -> None:
        """A record parsed whole (its ``data`` a dict), as ``Conversation.record_handlers`` would read it."""
        if kind == TurnStart.type:
            self.turn_start(_read_opt_str(data.get("source")))
        elif kind == StepStart.type:
            self.step_start()
        elif kind == AssistantMessage.type:
            calls = _read_calls(data.get("tool_calls"))
            self.reply(bool(_read_str(data.get("content"))), [call.id for call in calls])
        elif kind == ToolResult.type:
            self.tool_result(_read_str(data.get("id")), len(_read_images(data.get("images")) or ()))
        elif kind == TurnEnd.type:
            self.turn_end()
        elif kind == JobNotice.type:
            text = _read_str(data.get("text"))
            if text:
                self.notices.append(text)
        elif kind == ContextCompacted.type:
            self.held = 0
            self.compaction = data
            if self._mark is not None:
                self._mark = 0
                self._turn_notices = []
                self._calls = set()


def _heads(chunk: bytes, lines: list[bytes]) -> list[tuple[bytes, bytes] | None]:
    """Each line's record head (type, seq), None for a line without one or not ending as a record does; ``lines``
    are ``chunk``'s complete lines (the first perhaps begun in an earlier chunk). All found at once in the chunk
    when every line has one (each found with the end of the line before it), else line by line."""
    last = len(chunk) - len(chunk.rpartition(b"\n")[2]) - 1  # the chunk's last newline
    match = _HEAD.match
    first = match(lines[0])
    heads: list[tuple[bytes, bytes] | None] = _HEADS.findall(chunk, 0, last)
    if first is not None and len(heads) == len(lines) - 1 and chunk[last - 2 : last] == b"}}":
        heads.insert(0, (first[1], first[2]))
        return heads
    return [None if (head := match(line)) is None or line[-2:] != b"}}" else (head[1], head[2]) for line in lines]


def _text_share(fd: int, start: int, size: int) -> float:
    """The share of the log's last chunk that is message text (prompts, replies, reasoning, calls' arguments,
    tools' output, notices: characters over bytes), from its lines parsed whole; a tail long enough to hold so
    many characters is that many bytes over this."""
    low = max(start, size - line_reader._CHUNK)
    lines = os.pread(fd, size - low, low).split(b"\n")[1 if low > start else 0 : -1]
    text = 0
    for line in lines:
        try:
            record = loads(line)
            data = record["data"]
            kind = record["type"]
        except (ValueError, TypeError, KeyError):
            continue
        if type(data) is not dict:
            continue
        if kind == AssistantMessage.type:
            text += len(_read_str(data.get("content"))) + len(_read_opt_str(data.get("reasoning_content")) or "")
            text += sum(len(call.arguments) for call in _read_calls(data.get("tool_calls")))
        else:
            text += len(_read_str(data.get(_TEXT_FIELDS.get(kind, ""))))
    return max(text / max(sum(map(len, lines)), 1), 0.01)


_TEXT_FIELDS = {ToolResult.type: "output", TurnStart.type: "prompt", JobNotice.type: "text"}


def tail_start(fd: int, start: int, target: int) -> int:
    """The offset of the last line at or before ``target`` that begins a ``turn/start`` record; ``start`` if none
    lies between ``start`` (where lines after the header begin) and ``target``."""
    while target > start:
        low = max(start - 1, target - 1 - line_reader._CHUNK)
        data = os.pread(fd, target - 1 - low + len(_TURN_START), low)
        found = data.rfind(_TURN_START)
        if found >= 0 and low + found <= target - 1:
            return low + found + 1
        target = low
    return start


class PrefixSkim:
    """The prefix of one resume pass (module docstring): :meth:`scan` reads it, :meth:`watch` looks at the tail's
    records on their way to the conversation, :meth:`accepted` says whether the skim stands."""

    def __init__(self, tail_chars: int, recap: Recap | None, begin_tail: Callable[[MessageCount], None],
                 cut_in_tail: Callable[[], bool]) -> None:
        self.count = MessageCount()
        self._tail_chars = tail_chars  # the characters of message text the tail should hold
        self._recap = recap
        self._priced = recap is not None and recap.info is not None
        self._prices: dict[bytes, Prices | None] = {}  # each hour's prices, looked up once
        self._begin_tail = begin_tail  # hands the conversation what the prefix leaves it
        self._cut_in_tail = cut_in_tail  # whether, once finished, the tail's cut left out messages of its own
        self._skimmed = False
        self._tail_turns = 0  # turn/start records the recap counts, in the tail
        self._tail_prompted = False  # one of them prompted by the user
        self._tail_opened = False  # the tail's first record was one of them
        self._watching = False  # the tail's records are looked at until the recap's turns are found there
        # How a turn's start, a reply and a tool's result are read by their raw fields (``at``: past the head);
        # each says False when the line must be parsed whole instead.
        self._skims: dict[bytes, Callable[[bytes, int, Loaded], bool]] = {
            b"assistant/message": self._assistant, b"tool/result": self._tool_result, b"turn/start": self._turn_start}

    def scan(self, fd: int, start: int, size: int, loaded: Loaded, path: Path) -> tuple[int, int]:
        """Skim from ``start`` (after the header) to the tail's start; ``(that offset, the lines skimmed)``."""
        tail_bytes = int(self._tail_chars / _text_share(fd, start, size)) if size - start > self._tail_chars else 0
        end = tail_start(fd, start, size - tail_bytes) if tail_bytes and size - start > tail_bytes else start
        lines = 0
        position = start
        parts: list[bytes] = []  # the pieces of a line that goes on past a chunk (joined once, not quadratically)
        while position < end:
            chunk = os.pread(fd, min(line_reader._CHUNK, end - position), position)  # as the exact reader reads
            if not chunk:
                break
            position += len(chunk)
            batch = chunk.split(b"\n")
            if len(batch) == 1:
                parts.append(chunk)
                continue
            if parts:
                parts.append(batch[0])
                batch[0] = b"".join(parts)
                parts = []
            rest = batch.pop()  # empty at ``end``: a turn/start line begins there
            if rest:
                parts.append(rest)
            self._skim(batch, _heads(chunk, batch), 2 + lines, loaded, path)
            lines += len(batch)
            del chunk, batch
        self._skimmed = self._watching = end > start
        self._begin_tail(self.count)
        return end, lines

    def _skim(self, lines: list[bytes], heads: list[tuple[bytes, bytes] | None], number: int, loaded: Loaded,
              path: Path) -> None:
        """One chunk's lines, each skimmed by its head (:func:`_heads`) or parsed whole, in order, its seq counted
        as the exact reader counts it."""
        count = self.count
        step_start, turn_end, skims = count.step_start, count.turn_end, self._skims
        next_seq = loaded.next_seq
        for offset, (line, head) in enumerate(zip(lines, heads, strict=True)):
            if head is not None:
                kind, seq = head
                if kind == b"step/start":
                    step_start()
                elif kind == b"turn/end":
                    turn_end()
                elif kind != b"tool/call" and ((skim := skims.get(kind)) is None
                                               or not skim(line, 25 + len(kind) + len(seq), loaded)):
                    head = None
            if head is not None and int(head[1]) == next_seq:
                next_seq += 1
                continue
            loaded.next_seq, loaded.max_seq = next_seq, max(loaded.max_seq, next_seq - 1)
            if head is None:
                self._parse(line, number + offset, loaded, path)
            else:
                count_seq(int(head[1]), number + offset, path, loaded)
            next_seq = loaded.next_seq
        loaded.next_seq, loaded.max_seq = next_seq, max(loaded.max_seq, next_seq - 1)

    def _turn_start(self, line: bytes, at: int, loaded: Loaded) -> bool:
        if b',"source":' in line or b'"images":' in line:
            return False  # a turn that delivers notices, a prompt with images: parsed whole
        found = _TURN.match(line, at)
        if found is None:
            return False
        turn = int(found.group(1))
        if turn > loaded.last_turn:
            loaded.last_turn = turn
        self.count.turn_start(None)
        return True

    def _assistant(self, line: bytes, at: int, loaded: Loaded) -> bool:
        content = line.find(b',"content":', at) + 11
        calls_at = line.find(b',"tool_calls":[', content) + 14
        if content < 11 or calls_at < 14 or line[content : content + 1] != b'"':
            return False  # no content string (null, a number): parsed whole
        ids: list[str] = []
        if line[calls_at + 1 : calls_at + 2] != b"]":
            calls_end = line.find(b'],"finish_reason":', calls_at)
            raw = _CALL_IDS.findall(line, calls_at, calls_end) if calls_end > 0 else []
            if not raw:
                return False  # calls not as the writer puts them: parsed whole
            try:
                ids = [each.decode() for each in raw]
            except UnicodeDecodeError:
                return False
        if self._priced and not self._spend(line, at):
            return False
        self.count.reply(line[content + 1 : content + 2] != b'"', ids)
        return True

    def _spend(self, line: bytes, at: int) -> bool:
        """Add one request's cost to the recap's spend, as recap.py prices it: its usage, at its hour's prices."""
        assert self._recap is not None and self._recap.info is not None
        when = _UTC_HOUR.match(line, at)
        if when is None:
            return False
        try:
            prices = self._prices[when[1]]
        except KeyError:
            try:
                stamp = _dt.datetime.fromisoformat(line[at + 1 : when.end() - 2].decode())
            except ValueError:
                return False  # not a time (a 13th month): parsed whole, priced as recap.py prices it
            prices = self._prices[when[1]] = self._recap.info.prices_at(stamp)
        if prices is None:
            return True  # no prices at that hour: no cost
        usage = _USAGE.match(line, line.rfind(b',"usage":'))
        if usage is None:
            return line.endswith(b',"usage":null}}')  # no usage, no cost; else parsed whole
        prompt, completion, hit, miss = map(int, usage.group(1, 2, 4, 5))
        miss = miss or max(prompt - hit, 0)  # cost_usd's sum, term by term (no Usage built: 100 000s of them)
        self._recap.spent += (hit * prices.cache_hit + miss * prices.cache_miss + completion * prices.output) / 1e6
        return True

    def _tool_result(self, line: bytes, at: int, loaded: Loaded) -> bool:
        if b'"images":' in line or (self._priced and b'"name":"web_' in line):
            return False  # an image to count, a DeepSeek search to price: parsed whole
        begin = line.find(b',"id":"', at) + 7
        end = line.find(b'","name":"', begin)
        call_id = line[begin:end]
        if begin < 7 or end < 0 or b"\\" in call_id:
            return False
        try:
            self.count.tool_result(call_id.decode(), 0)
        except UnicodeDecodeError:
            return False
        return True

    def _parse(self, line: bytes, number: int, loaded: Loaded, path: Path) -> None:
        """A line parsed whole, reported as the exact reader reports it, applied to the count and the recap."""
        for record in parse_body_by_line([line], path, loaded, number):
            kind, data = record["type"], record.get("data")
            if type(data) is dict:
                turn = data.get("turn")
                if kind == TurnStart.type and isinstance(turn, int) and turn > loaded.last_turn:
                    loaded.last_turn = turn
            self.count.apply(kind, data if type(data) is dict else {})
            if self._recap is not None:
                self._recap(record)

    def watch(self, take: RecordBatch) -> RecordBatch:
        """``take`` for the tail's records, noting the turns the recap sees there first."""

        def watched(records: list[dict[str, Any]]) -> None:
            if self._watching:
                self._note(records)
            take(records)

        return watched

    def _note(self, records: list[dict[str, Any]]) -> None:
        """The recap's turns in the tail (recap.py reads a ``turn/start`` whose turn is an int): it must open the
        tail, and :data:`~dsh.agent_loop.recap.KEEP` of them, one prompted by the user, must be there."""
        for record in records:
            data = record.get("data")
            turn = data.get("turn") if type(data) is dict else None
            opens = record["type"] == TurnStart.type and isinstance(turn, int) and not isinstance(turn, bool)
            if self._tail_turns == 0:
                self._tail_opened = opens
            if opens:
                self._tail_turns += 1
                self._tail_prompted = self._tail_prompted or data.get("source") != NOTICE_SOURCE  # type: ignore[union-attr]
            if not self._tail_opened or (self._tail_turns >= KEEP and self._tail_prompted):
                self._watching = False
                return

    def accepted(self) -> bool:
        """Whether the skim stands: nothing skimmed, or the tail's cut left messages out (so every message of the
        prefix was left out too) and the tail holds the recap's last turns and a prompt."""
        if not self._skimmed:
            return True
        cut_in_tail = self._cut_in_tail() or self.count.held == 0
        return cut_in_tail and self._tail_opened and self._tail_turns >= KEEP and self._tail_prompted
