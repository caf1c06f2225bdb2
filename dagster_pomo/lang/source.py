"""Source text and spans: where every AST node and diagnostic points."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

EXCERPT = 100  # characters of a source line shown under a diagnostic, at most


class Span(NamedTuple):
    """A half-open range ``[start, end)`` of character offsets, with 1-based line/column.
    A named tuple, not a dataclass: a parse makes several a rule, and a tuple is made
    three times faster."""

    start: int
    end: int
    line: int
    column: int

    def __repr__(self) -> str:
        return f"Span({self.line}:{self.column})"


@dataclass(frozen=True)
class Source:
    """A corpus text and the name it is reported under (usually its path)."""

    name: str
    text: str = field(repr=False)

    @cached_property
    def _line_starts(self) -> list[int]:
        starts = [0]
        starts.extend(i + 1 for i, ch in enumerate(self.text) if ch == "\n")
        return starts

    def span(self, start: int, end: int) -> Span:
        """The span of ``text[start:end]`` with its line and column filled in."""
        if not 0 <= start <= end <= len(self.text):
            start = max(0, min(start, len(self.text)))
            end = max(start, min(end, len(self.text)))
        starts = self._line_starts
        line = bisect.bisect_right(starts, start)
        return Span(start, end, line, start - starts[line - 1] + 1)

    def line_text(self, line: int) -> str:
        """The text of 1-based ``line`` without its newline."""
        begin = self._line_starts[line - 1]
        stop = self.text.find("\n", begin)
        return self.text[begin : stop if stop >= 0 else len(self.text)]

    def slice(self, span: Span) -> str:
        return self.text[span.start : span.end]

    def excerpt(self, span: Span) -> list[str]:
        """The span's first line, indented, and a caret line under the span. A line longer
        than :data:`EXCERPT` characters is cut to that many around the caret."""
        text = self.line_text(span.line).replace("\t", " ")
        column = span.column - 1
        width = max(1, min(span.end - span.start, len(text) - column))
        if len(text) > EXCERPT:
            first = max(0, min(column - EXCERPT // 4, len(text) - EXCERPT))
            shown = text[first : first + EXCERPT]
            before, after = ("..." if first else ""), ("..." if first + EXCERPT < len(text) else "")
            text, column = before + shown + after, column - first + len(before)
            width = max(1, min(width, len(shown) - (column - len(before))))
        return [f"    {text}", "    " + " " * column + "^" * width]
