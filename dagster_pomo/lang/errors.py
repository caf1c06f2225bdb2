"""Diagnostics for rule corpora: what is wrong, where, and what to do.

Every corpus error carries :class:`Diagnostic` objects that point into the
source, so the CLI and the Dagster layer can show ``FILE:LINE:COL: message``
followed by the source line and a caret.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from dagster_pomo.errors import PomoError
from dagster_pomo.lang.source import Source, Span


class Severity(Enum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Diagnostic:
    """One finding about a corpus, anchored at a span of its source."""

    message: str
    span: Span
    hint: str | None = None
    severity: Severity = Severity.ERROR

    def render(self, source: Source) -> str:
        """``FILE:LINE:COL: message``, the source line, a caret and the hint."""
        head = f"{source.name}:{self.span.line}:{self.span.column}: "
        if self.severity is Severity.WARNING:
            head += "warning: "
        lines = [head + self.message, *source.excerpt(self.span)]
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)


def sort_diagnostics(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    """Source order, then message, so output is stable whichever pass found what."""
    return sorted(diagnostics, key=lambda d: (d.span.start, d.span.end, d.message))


SHOWN = 100  # diagnostics rendered at once: the first ones, then how many more


def render_all(source: Source, diagnostics: Sequence[Diagnostic], limit: int = SHOWN) -> str:
    """The first ``limit`` diagnostics rendered, then a line counting the rest: a corpus
    with a hundred thousand errors still prints a page."""
    shown = [d.render(source) for d in diagnostics[:limit]]
    rest = len(diagnostics) - limit
    if rest > 0:
        kinds = (
            "errors and warnings"
            if len({d.severity for d in diagnostics}) > 1
            else ("warnings" if diagnostics[0].severity is Severity.WARNING else "errors")
        )
        shown.append(f"{source.name}: ... and {rest:,} more {kinds} not shown")
    return "\n".join(shown)


class CorpusError(PomoError):
    """A rule corpus has one or more errors; ``diagnostics`` lists all of them."""

    def __init__(self, source: Source, diagnostics: Sequence[Diagnostic]) -> None:
        self.source = source
        self.diagnostics = sort_diagnostics(diagnostics)
        super().__init__(self.render())

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity is Severity.ERROR]

    def render(self) -> str:
        """The first :data:`SHOWN` diagnostics, and how many more there are."""
        return render_all(self.source, self.diagnostics)


class PomoSyntaxError(CorpusError):
    """The corpus text does not parse. The only error the parser lets escape."""


class StratificationError(CorpusError):
    """Negation or aggregation sits on a recursive cycle."""
