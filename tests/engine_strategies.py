"""Generated corpora and event streams for differential tests of the evaluators.

Corpora are stratifiable by construction: each derived relation reads inputs and
relations defined before it (negation and aggregation only of those), plus
itself positively when it is recursive.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

INPUTS = ("a", "b", "c")  # a(x, y), b(x, y), c(x)
LIFETIMES = (None, 3, 10, 30)


@dataclass(frozen=True)
class Case:
    corpus: str
    events: list[tuple[str, int, list[int]]]

    def __repr__(self) -> str:
        lines = "\n".join(f"  {e}" for e in self.events)
        return f"Case(corpus=\n{self.corpus}\nevents=\n{lines})"


@st.composite
def corpora(draw: st.DrawFn) -> str:
    lines = []
    for name, arity in (("a", 2), ("b", 2), ("c", 1)):
        cols = ", ".join(f"{v}: int" for v in "xy"[:arity])
        life = draw(st.sampled_from(LIFETIMES))
        lines.append(f".decl {name}({cols})" + (f" lifetime {life}" if life else "") + ";")
    pairs = ["a", "b"]  # binary relations available to later rules
    unary = ["c"]
    aggregated: list[str] = []
    for i in range(draw(st.integers(1, 4))):
        d = f"d{i}"
        kind = draw(
            st.sampled_from(
                ["join", "const", "guard", "negate", "aggregate", "time", "recursive", "read_agg"]
            )
        )
        p, q = draw(st.sampled_from(pairs)), draw(st.sampled_from(pairs))
        if kind == "join":
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
        elif kind == "aggregate":
            agg = draw(
                st.sampled_from(["@count", "@sum(y)", "@min(y)", "@max(y)", "@count @sum(y)"])
            )
            lines.append(f"{d}(x) {agg} := {p}(x, y);")
            unary.append(d)
            aggregated.append(d)
            continue
        elif kind == "time":
            k = draw(st.sampled_from([-3, 0, 5]))
            lines.append(f"{d}(x, y) @time(t + {k}) := {p}(x, y) @time(t);")
        elif kind == "read_agg" and aggregated:
            src = draw(st.sampled_from(aggregated))
            lines.append(
                f"{d}(x, n) := {src}(x) @count(n) ^ {p}(x, _);"
                if "@count" in _rule_of(lines, src)
                else f"{d}(x, x) := {src}(x) ^ {p}(x, _);"
            )
        else:
            lines.append(f"{d}(x, y) := {p}(x, y);")
            step = draw(
                st.sampled_from(
                    [
                        f"{d}(x, z) := {d}(x, y) ^ {q}(y, z);",
                        f"{d}(x, z) := {d}(x, y) ^ {q}(y, z) if x != z;",
                        f"{d}(x, z) := {d}(x, y) ^ {q}(y, z) ^ !c(z);",
                        # Same generation: no argument passes through unchanged.
                        f"{d}(x, y) := {p}(a, x) ^ {d}(a, b) ^ {q}(b, y);",
                    ]
                )
            )
            lines.append(step)
        pairs.append(d)
    return "\n".join(lines) + "\n"


def _rule_of(lines: list[str], relation: str) -> str:
    return next(line for line in lines if line.startswith(f"{relation}("))


@st.composite
def event_streams(
    draw: st.DrawFn, max_events: int = 18, horizon: int = 40
) -> list[tuple[str, int, list[int]]]:
    events = []
    for _ in range(draw(st.integers(0, max_events))):
        rel = draw(st.sampled_from(INPUTS))
        arity = 1 if rel == "c" else 2
        args = [draw(st.integers(0, 3)) for _ in range(arity)]
        events.append((rel, draw(st.integers(0, horizon)), args))
    return events


cases = st.builds(Case, corpora(), event_streams())
