"""Generated corpora and event streams for differential tests of the evaluators.

Corpora are stratifiable by construction: each derived relation reads inputs and
relations defined before it (negation and aggregation only of those), plus
itself positively when it is recursive. Between them they use every construct of
the language: joins, constants, guards, negation, every aggregate (read back in
later bodies), head expressions and functions, ``where`` definitions, unions of
rules, explicit ``@time`` (past and future), clocks, recursion, declared
lifetimes of derived relations, ``@next`` sequences, content IDs and body aggregates, sets
(``@collect``) and a registered lattice (``@lattice``); `with_provenance` adds
``@provenance`` to some heads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from dagster_pomo.lang import parse
from dagster_pomo.lang.inductive import state_relations

INPUTS = ("a", "b", "c")  # a(x, y), b(x, y), c(x)
LIFETIMES = (None, 3, 10, 30)
KINDS = (
    "join",
    "const",
    "guard",
    "negate",
    "aggregate",
    "time",
    "recursive",
    "read_agg",
    "union",
    "expr",
    "where",
    "clock",
    "timed_agg",
    "next",
    "async",
    "cid",
    "body_agg",
    "choose",
)
# `flags` is a lattice the tests register (bitwise or: `dagster_pomo.examples`).
AGGREGATES = (
    "@count",
    "@sum(y)",
    "@min(y)",
    "@max(y)",
    "@average(y)",
    "@collect(y)",
    '@lattice("flags", y)',
)
# Head expressions over two integers: signs, truncating division and remainder, functions.
EXPRESSIONS = (
    "y + 1",
    "y - x",
    "x * 2 - y",
    "(y - x) / 2",
    "(y - x) % 3",
    "abs(x - y)",
    "max(x, y)",
    "min(x, y) - 1",
)


@dataclass(frozen=True)
class Case:
    corpus: str
    events: list[Event]

    @property
    def sequential(self) -> bool:
        """Whether the corpus has ``@next`` or ``@async`` rules, whose results depend on the
        epoch size (docs/semantics.md, Epochs), so that only evaluations with the same
        epochs agree."""
        return "@next" in self.corpus or "@async" in self.corpus

    def __repr__(self) -> str:
        lines = "\n".join(f"  {e}" for e in self.events)
        return f"Case(corpus=\n{self.corpus}\nevents=\n{lines})"


def body_aggregate(draw: st.DrawFn, d: str, p: str, q: str) -> str:
    """A rule with body aggregates: grouped by a positive atom's variable, with no positive
    atom at all, two over different groups compared, or an average in a guard."""
    fn = draw(st.sampled_from(["count", "sum", "min", "max"]))
    summary = fn if fn == "count" else f"{fn} w"
    own = "_" if fn == "count" else "w"  # the summarised variable's place
    form = draw(st.integers(0, 3))
    if form == 0:
        return f"{d}(x, v) := {p}(x, _) ^ v = {summary} : {q}(x, {own});"
    if form == 1:
        return f"{d}(v, n) := v = {summary} : {p}(_, {own}) ^ n = count : {q}(_, _);"
    if form == 2:
        return (
            f"{d}(x, y) := {p}(x, y) ^ n = count : {q}(x, _) ^ m = {summary} : {q}({own}, y)"
            " if n > m;"
        )
    return f"{d}(x, y) := {p}(x, y) ^ v = average w : {q}(w, x) if v > y;"


@st.composite
def corpora(draw: st.DrawFn, kinds: tuple[str, ...] = KINDS) -> str:
    lines = []
    for name, arity in (("a", 2), ("b", 2), ("c", 1)):
        cols = ", ".join(f"{v}: int" for v in "xy"[:arity])
        life = draw(st.sampled_from(LIFETIMES))
        lines.append(f".decl {name}({cols})" + (f" lifetime {life}" if life else "") + ";")
    pairs = ["a", "b"]  # binary relations of integers available to later rules
    unary = ["c"]
    aggregated: dict[str, list[str]] = {}  # relation -> the aggregates it carries
    for i in range(draw(st.integers(1, 4))):
        d = f"d{i}"
        kind = draw(st.sampled_from(kinds))
        p, q = draw(st.sampled_from(pairs)), draw(st.sampled_from(pairs))
        if kind in ("aggregate", "timed_agg", "clock"):
            aggs = draw(st.lists(st.sampled_from(AGGREGATES), min_size=1, max_size=3, unique=True))
            head = f"{d}(x) {' '.join(aggs)}"
            if kind == "aggregate":
                lines.append(f"{head} := {p}(x, y);")
            elif kind == "timed_agg":
                # One version of the group's event per match time (docs/semantics.md); or
                # the matches of a bucket of four times stamped at its end, after most of
                # them: all made before it are known then, one version of that time.
                at = draw(st.sampled_from(["t", "t - t % 4 + 3"]))
                lines.append(f"{head} @time({at}) := {p}(x, y) @time(t);")
            else:
                offset, period = draw(st.sampled_from([0, 2])), draw(st.sampled_from([3, 5]))
                # Stamped at the tick, or the middle of the period before it, or later.
                at = draw(st.sampled_from(["tick", "tick - n / 2", "1 + tick"]))
                lines.append(
                    f"{head} @time({at}) := {p}(x, y) @time(seen) ^ clock(o, n) @time(tick)"
                    f" if seen < tick ^ seen >= tick - n where o = {offset}, n = {period};"
                )
            unary.append(d)
            readable = [a.split("(")[0] for a in aggs if not a.startswith("@collect")]
            if readable:  # a collected set is no value a body reads
                aggregated[d] = readable
            continue
        if kind == "read_agg" and aggregated:
            src = draw(st.sampled_from(sorted(aggregated)))
            ann = draw(st.sampled_from(aggregated[src]))
            if ann == "@count":
                lines.append(f"{d}(x, n) := {src}(x) @count(n) ^ {p}(x, _);")
            elif ann == "@average":
                # A float: compared, not stored, so later joins stay over integers.
                k = draw(st.sampled_from([0, 1, 2]))
                lines.append(f"{d}(x, y) := {src}(x) @average(v) ^ {p}(x, y) if v > {k}.5;")
            else:
                lines.append(f"{d}(x, v) := {src}(x) {ann}(v) ^ {p}(x, _);")
        elif kind == "join":
            lines.append(f"{d}(x, z) := {p}(x, y) ^ {q}(y, z);")
        elif kind == "const":
            k = draw(st.integers(0, 3))
            lines.append(f"{d}(x, y) := {p}(x, y) ^ {q}(y, {k});")
        elif kind == "guard":
            k = draw(st.integers(-1, 2))
            lines.append(f"{d}(x, y) := {p}(x, y) if x < y + {k};")
        elif kind == "negate":
            u = draw(st.sampled_from(unary))
            neg = draw(st.sampled_from([f"!{q}(y, _)", f"!{u}(x)"]))
            lines.append(f"{d}(x, y) := {p}(x, y) ^ {neg};")
        elif kind == "time":
            k = draw(st.sampled_from([-3, 0, 5]))
            lines.append(f"{d}(x, y) @time(t + {k}) := {p}(x, y) @time(t);")
        elif kind == "union":
            lines.append(f"{d}(x, y) := {p}(x, y);")
            lines.append(f"{d}(y, x) := {q}(x, y) if x != y;")
        elif kind == "cid":
            # Content IDs stored, then matched again (a bound one filters to its event),
            # or compared between two events of a match.
            if draw(st.booleans()):
                j = draw(st.integers(-1, 2))
                lines.append(f"{d}_ids(k, x) := {p}(x, y) @cid(k) if y > {j};")
                lines.append(f"{d}(x, y) := {d}_ids(k, x) ^ {p}(x, y) @cid(k);")
            else:
                lines.append(f"{d}(x, z) := {p}(x, y) @cid(k) ^ {q}(y, z) @cid(m) if k < m;")
        elif kind == "choose":
            # Per key and match time, the least value (a functional dependency).
            if draw(st.booleans()):
                lines.append(f"{d}(x, z) := {p}(x, y) ^ {q}(y, z) ^ choose((x), (z));")
            else:
                lines.append(f"{d}(x, y) := {p}(x, y) ^ {q}(_, z) ^ choose((), (y, z));")
        elif kind == "body_agg":
            lines.append(body_aggregate(draw, d, p, q))
        elif kind == "expr":
            lines.append(f"{d}(x, {draw(st.sampled_from(EXPRESSIONS))}) := {p}(x, y);")
        elif kind == "where":
            lines.append(f"{d}(x, z) := {p}(x, y) if z > 0 where z = y * 2 - x;")
        elif kind == "async":
            # Messages (Dedalus `@async`): each match of an epoch delivered at the next one's
            # start, negation as of the match's time; what they derive, in later epochs.
            if p in state_relations(parse("\n".join(lines))):
                p = "a"
            u = draw(st.sampled_from(unary))
            lines.append(f"{d}(x, y) @async := {p}(x, y) ^ !{u}(y);")
            lines.append(f"{d}_seen(x) := {d}(x, _);")
            unary.append(f"{d}_seen")
        elif kind == "next":
            # A sequence (Dedalus): carried from epoch to epoch until `c` stops it. What
            # starts it must happen (an input, or derived from one): `@next` safety.
            u = draw(st.sampled_from(unary))
            if p in state_relations(parse("\n".join(lines))):
                p = "a"
            lines.append(f"{d}(x, y) @next := {p}(x, y);")
            lines.append(f"{d}(x, y) @next := {d}(x, y) ^ !{u}(x);")
        else:
            lines.append(f"{d}(x, y) := {p}(x, y);")
            step = draw(
                st.sampled_from(
                    [
                        f"{d}(x, z) := {d}(x, y) ^ {q}(y, z);",
                        f"{d}(x, z) := {d}(x, y) ^ {q}(y, z) if x != z;",
                        f"{d}(x, z) := {d}(x, y) ^ {q}(y, z) ^ !c(z);",
                        # Each step later than the last: versions deferred from round to round.
                        f"{d}(x, z) @time(t + 2) := {d}(x, y) @time(t) ^ {q}(y, z);",
                        # Same generation: no argument passes through unchanged.
                        f"{d}(x, y) := {p}(a, x) ^ {d}(a, b) ^ {q}(b, y);",
                    ]
                )
            )
            lines.append(step)
        if kind not in ("read_agg", "next"):
            life = draw(st.sampled_from(LIFETIMES))
            if life:  # the derived relation's own lifetime limits its events' `exp`
                lines.append(f".decl {d}(x: int, y: int) lifetime {life};")
        pairs.append(d)
    return "\n".join(lines) + "\n"


# An event (relation, time, arguments), and how its landing line writes it (`landing_line`).
Event = tuple[str, int, list[int]] | tuple[str, int, list[int], int]
FORMS = 5


@st.composite
def event_streams(draw: st.DrawFn, max_events: int = 18, horizon: int = 40) -> list[Event]:
    """Events, some landed again: the same event in another line, often written another
    way (`landing_line`), which must count as the one event it is."""
    events: list[Event] = []
    for _ in range(draw(st.integers(0, max_events))):
        rel = draw(st.sampled_from(INPUTS))
        arity = 1 if rel == "c" else 2
        args = [draw(st.integers(0, 3)) for _ in range(arity)]
        events.append((rel, draw(st.integers(0, horizon)), args))
    if events:
        again = st.tuples(st.sampled_from(events), st.integers(0, FORMS - 1))
        for (rel, t, args, *_), form in draw(st.lists(again, max_size=6)):
            events.append((rel, t, args, form))
    return events


def landing_line(event: Event, columns: Sequence[str]) -> str:
    """An event's landing line, in one of `FORMS` ways that all mean the same event: as JSON
    writes it, the time in ISO-8601 with an offset, the arguments by name (``columns``, its
    relation's), the relation's name escaped with spaces around, and every way at once."""
    rel, t, args, *rest = event
    form = rest[0] if rest else 0
    if form == 0:
        return json.dumps({"relation": rel, "t": t, "args": args})
    when = datetime.fromtimestamp(t / 1000, UTC) + timedelta(hours=2)
    iso = when.isoformat(timespec="milliseconds").replace("+00:00", "+02:00")
    named = dict(zip(columns, args, strict=True))
    if form == 1:
        return json.dumps({"relation": rel, "t": iso, "args": args})
    if form == 2:
        return json.dumps({"args": named, "relation": rel, "t": t})
    escaped = "".join(f"\\u{ord(ch):04x}" for ch in rel)
    if form == 3:
        return f'  {{ "relation" : "{escaped}" , "t" : {t}, "args" : {json.dumps(args)} }} '
    return f'{{"t": "{iso}", "args": {json.dumps(named)}, "relation": "{escaped}"}}\t'


@st.composite
def with_provenance(draw: st.DrawFn, corpus: st.SearchStrategy[str]) -> str:
    """A generated corpus whose rules' heads ask for `@provenance` here and there (the last
    rule always): carriers read by carriers, by others and through recursion, aggregates
    and `@next` state among them."""
    lines = draw(corpus).splitlines()
    rules = [i for i, line in enumerate(lines) if " := " in line]
    asked = {rules[-1], *draw(st.sets(st.sampled_from(rules)))} if rules else set()
    for i in asked:
        lines[i] = lines[i].replace(" := ", " @provenance := ", 1)
    return "\n".join(lines) + "\n"


cases = st.builds(Case, corpora(), event_streams())
