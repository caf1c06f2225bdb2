"""The front end as one pipeline: parse, check, catalogue, stratify.

Every pass is a plain function that returns diagnostics; this module runs them
in order and raises one :class:`CorpusError` holding every error found, so a
user fixes a file in one round rather than one error at a time.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from dagster_pomo.errors import UsageError
from dagster_pomo.lang import ast
from dagster_pomo.lang.attributes import resolve_attributes
from dagster_pomo.lang.catalog import Catalog, build_catalog
from dagster_pomo.lang.check import check_names, check_rules
from dagster_pomo.lang.errors import (
    CorpusError,
    Diagnostic,
    Severity,
    StratificationError,
    sort_diagnostics,
)
from dagster_pomo.lang.expiry import check_expiry
from dagster_pomo.lang.growth import check_cross_products, check_growth
from dagster_pomo.lang.inductive import check_inductive
from dagster_pomo.lang.kinds import check_kinds
from dagster_pomo.lang.parser import parse
from dagster_pomo.lang.render import render_decl, render_rule
from dagster_pomo.lang.stratify import Stratum, stratify


@dataclass(frozen=True)
class Program:
    """A corpus that passed every check: what the engine and the Dagster layer consume."""

    name: str
    corpus: ast.Corpus
    catalog: Catalog
    strata: tuple[Stratum, ...]
    warnings: tuple[Diagnostic, ...] = ()

    @property
    def source(self):  # noqa: ANN201 - a Source, re-exported for convenience
        return self.corpus.source

    def rule_text(self, rule: ast.Rule) -> str:
        """The rule exactly as the user wrote it."""
        return self.corpus.source.slice(rule.span).strip()

    def doc_comment(self, statement: ast.Statement) -> str:
        """The comment lines right above ``statement`` (``#`` or ``//``, no blank line
        between), without their markers: what the author wrote about it."""
        lines = self.corpus.source.text.splitlines()
        found: list[str] = []
        at = statement.span.line - 2  # the line above, 0-based
        while at >= 0:
            text = lines[at].strip()
            marker = "#" if text.startswith("#") else "//" if text.startswith("//") else None
            if marker is None:
                break
            found.append(text[len(marker) :].strip())
            at -= 1
        return "\n".join(reversed(found)).strip()

    def warnings_about(self, relation: str) -> list[Diagnostic]:
        """The warnings about the rules that derive ``relation``."""
        spans = [r.span for r in self.corpus.rules if r.head.relation == relation]
        return [w for w in self.warnings if any(s.start <= w.span.start < s.end for s in spans)]

    def definition(self, relation: str) -> str:
        """What defines ``relation``'s events, as canonical text: its ``.decl`` and the rules
        and facts that derive it, in a stable order, without layout, comments or the
        handlers they notify. Edits that leave this text alone cannot change the events."""
        decl = self.catalog[relation].decl
        rules = sorted(
            render_rule(replace(rule, head=replace(rule.head, handlers=())))
            for rule in self.corpus.rules
            if rule.head.relation == relation and (rule.body or rule.is_fact)
        )
        return "\n".join(([render_decl(decl)] if decl else []) + rules)


_CORPUS_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


def check_corpus_name(name: str) -> None:
    """A corpus names a folder of the warehouse and Dagster asset keys: letters, digits,
    ``_``, ``-`` and ``.``, starting with a letter or digit, at most 100 characters (so it
    is never ``..`` nor a path)."""
    if not _CORPUS_NAME.fullmatch(name) or ".." in name:
        raise UsageError(
            f"`{name[:100]}` cannot name a corpus (its folder in the warehouse, its assets): "
            "use letters, digits, `_`, `-` and `.`, starting with a letter or digit, at most "
            "100 characters; rename the file or pass another name"
        )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector paused: the passes build a few objects per character of
    the corpus and keep them, so the collector's full sweeps, triggered by every few
    hundred thousand of them, took half of checking a large corpus."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def compile_corpus(
    text: str | bytes, name: str = "<corpus>", corpus_name: str | None = None
) -> Program:
    """Check ``text`` completely; raise :class:`CorpusError` listing every error."""
    with _collector_paused():
        return _compile(text, name, corpus_name)


def _compile(text: str | bytes, name: str, corpus_name: str | None) -> Program:
    stem = corpus_name or ("corpus" if name.startswith("<") else Path(name).stem)
    check_corpus_name(stem)
    corpus, found = resolve_attributes(parse(text, name))
    found += [*check_names(corpus), *check_rules(corpus), *check_inductive(corpus)]
    catalog, catalog_problems = build_catalog(corpus)
    found += catalog_problems
    found += [d for rule in corpus.rules for d in check_kinds(rule, catalog)]
    found += [d for rule in corpus.rules for d in check_expiry(rule, catalog)]
    strata, cycle_problems = stratify(corpus)
    found += [*check_cross_products(corpus), *check_growth(strata)]
    errors = [d for d in found if d.severity is Severity.ERROR]
    if errors or cycle_problems:
        kind = StratificationError if cycle_problems and not errors else CorpusError
        raise kind(corpus.source, errors + cycle_problems)
    warnings = tuple(sort_diagnostics(d for d in found if d.severity is Severity.WARNING))
    return Program(stem, corpus, catalog, tuple(strata), warnings)


def load_program(path: str | Path) -> Program:
    """Read and check a corpus file; the corpus is named after the file's stem."""
    path = Path(path)
    return compile_corpus(path.read_bytes(), str(path), path.stem)
