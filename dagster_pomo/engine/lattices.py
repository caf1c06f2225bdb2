"""Lattices of a user's own: merge functions registered by name, for `@lattice("name", v)`.

A head's ``@lattice("name", v)`` aggregates ``v`` over the matches alive at a time (as
``@max(v)`` does) with the merge function registered under ``name``: it must be
associative, commutative and idempotent (a semilattice's join), so neither the order
nor repeats of the values change the result, on any engine or epoch size. Functions
are registered by the program that runs the corpus (`pomo_definitions(lattices=...)`,
`pomo run --lattice NAME=module:function`), never looked up from corpus text. Spark's
Python workers call them, so they must be importable there, like any UDF's module.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Mapping

from dagster_pomo.errors import UsageError
from dagster_pomo.lang import Program
from dagster_pomo.lang.interpret import Value

Merge = Callable[[Value, Value], Value]

_REGISTERED: dict[str, Merge] = {}


def register_lattice(name: str, merge: Merge) -> None:
    """Make ``merge`` the lattice ``name`` of every corpus this process runs."""
    if not callable(merge):
        raise UsageError(f"lattice `{name}`: {merge!r} is not a function of two values")
    _REGISTERED[name] = merge


def register_lattices(lattices: Mapping[str, Merge]) -> None:
    for name, merge in lattices.items():
        register_lattice(name, merge)


def load_lattice(spec: str) -> tuple[str, Merge]:
    """``NAME=module:function`` (what ``pomo run --lattice`` takes) as a name and function."""
    name, _, target = spec.partition("=")
    module, _, attribute = target.partition(":")
    if not name or not module or not attribute:
        raise UsageError(f"--lattice {spec!r}: write NAME=module:function")
    try:
        merge = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"--lattice {spec!r}: {exc}") from None
    return name, merge


def used(program: Program) -> list[str]:
    """The lattices ``program``'s heads merge with, in order of first use."""
    names = [
        ann.lattice
        for rule in program.corpus.rules
        for ann in rule.aggregates
        if ann.lattice is not None
    ]
    return list(dict.fromkeys(names))


def require(program: Program) -> None:
    """Raise, before anything is evaluated, if a lattice ``program`` uses is not registered."""
    missing = [n for n in used(program) if n not in _REGISTERED]
    if missing:
        known = ", ".join(sorted(_REGISTERED)) or "none"
        raise UsageError(
            f"no lattice registered as {', '.join(f'`{n}`' for n in missing)} "
            f"(registered: {known}): pass lattices={{name: merge}} to pomo_definitions, "
            "or --lattice NAME=module:function to pomo run"
        )


def merge_of(name: str) -> Merge:
    try:
        return _REGISTERED[name]
    except KeyError:
        raise UsageError(f"no lattice registered as `{name}`") from None


def fold(merge: Merge, values: Iterable[Value]) -> Value | None:
    """``values`` merged into one (None for none)."""
    values = list(values)
    return functools.reduce(merge, values) if values else None
