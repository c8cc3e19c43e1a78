"""A tiny VT100 screen model: enough of xterm to read what prompt_toolkit draws.

prompt_toolkit repaints by difference (it writes only the cells that changed, hopping over the
rest with cursor movements), so the live view and the toolbar cannot be matched in the raw byte
stream. Feeding the bytes through this model gives the screen a user actually sees.
"""

from __future__ import annotations

import re

_SEQUENCE = re.compile(r"\x1b\[([?>]?)([0-9;]*)([A-Za-z@])|\x1b[()][0-9A-Za-z]|\x1b[=>78]|\x1b\][^\x07]*\x07")


class Screen:
    def __init__(self, rows: int, cols: int) -> None:
        self.rows, self.cols = rows, cols
        self.lines = [[" "] * cols for _ in range(rows)]
        self.row = self.col = 0
        self.autowrap = True
        self._pending_wrap = False

    # --- text -------------------------------------------------------------------------------

    def text(self) -> str:
        return "\n".join("".join(line).rstrip() for line in self.lines)

    def __contains__(self, needle: str) -> bool:
        return needle in self.text()

    # --- feeding ----------------------------------------------------------------------------

    def feed(self, data: str) -> None:
        position = 0
        while position < len(data):
            char = data[position]
            if char == "\x1b":
                match = _SEQUENCE.match(data, position)
                if match is None:
                    position += 1
                    continue
                if match.group(3):
                    self._csi(match.group(1), match.group(2), match.group(3))
                position = match.end()
                continue
            self._char(char)
            position += 1

    def _linefeed(self) -> None:
        if self.row == self.rows - 1:
            self.lines.pop(0)
            self.lines.append([" "] * self.cols)
        else:
            self.row += 1

    def _char(self, char: str) -> None:
        if char == "\r":
            self.col, self._pending_wrap = 0, False
        elif char == "\n":
            self._pending_wrap = False
            self._linefeed()
        elif char == "\b":
            self.col, self._pending_wrap = max(0, self.col - 1), False
        elif char == "\t":
            self.col = min(self.cols - 1, (self.col // 8 + 1) * 8)
        elif char < " " or char == "\x7f":
            return
        else:
            if self._pending_wrap:
                self._pending_wrap = False
                if self.autowrap:
                    self.col = 0
                    self._linefeed()
            self.lines[self.row][self.col] = char
            if self.col == self.cols - 1:
                self._pending_wrap = True
            else:
                self.col += 1

    def _csi(self, private: str, params: str, final: str) -> None:
        numbers = [int(part) if part else 0 for part in params.split(";")] if params else []
        first = numbers[0] if numbers else 0
        count = first or 1
        self._pending_wrap = False
        if private == "?":
            if "7" in params.split(";") and final in "hl":
                self.autowrap = final == "h"
            return
        if final == "A":
            self.row = max(0, self.row - count)
        elif final == "B":
            self.row = min(self.rows - 1, self.row + count)
        elif final == "C":
            self.col = min(self.cols - 1, self.col + count)
        elif final == "D":
            self.col = max(0, self.col - count)
        elif final == "G":
            self.col = min(self.cols - 1, count - 1)
        elif final in "Hf":
            row = (numbers[0] if numbers else 1) or 1
            col = (numbers[1] if len(numbers) > 1 else 1) or 1
            self.row, self.col = min(self.rows, row) - 1, min(self.cols, col) - 1
        elif final == "K":
            line = self.lines[self.row]
            if first == 0:
                line[self.col :] = [" "] * (self.cols - self.col)
            elif first == 1:
                line[: self.col + 1] = [" "] * (self.col + 1)
            else:
                line[:] = [" "] * self.cols
        elif final == "J":
            if first == 0:
                self.lines[self.row][self.col :] = [" "] * (self.cols - self.col)
                for row in range(self.row + 1, self.rows):
                    self.lines[row] = [" "] * self.cols
            elif first == 1:
                for row in range(self.row):
                    self.lines[row] = [" "] * self.cols
                self.lines[self.row][: self.col + 1] = [" "] * (self.col + 1)
            else:
                self.lines = [[" "] * self.cols for _ in range(self.rows)]
        # m (colours), r (scroll region) and anything else: no effect on the text
