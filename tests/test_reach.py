"""A pipeline's step evaluates only the epochs that something stored since reaches
(docs/semantics.md, Late events): a late reading re-evaluates its epoch and the epochs
what it changes lives into, and keeps the rest as stored, which is what evaluating every
epoch would store. Checked against a run from scratch over the same files, on generated
corpora and event streams, and in the cases where nothing can be kept: an event that
never expires, a changed corpus, a downstream step that never saw an upstream's new
version, ``reach`` switched off.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_pomo.engine.pipeline import Pipeline, Storage
from dagster_pomo.engine.policy import DEFAULT, Policy
from dagster_pomo.examples import DEFAULT_START, HOUR, water_tank_events
from dagster_pomo.lang import compile_corpus, load_program
from dagster_pomo.plan.units import units
from dagster_pomo.timeline import epoch_key, epochs
from tests.conftest import RULES
from tests.engine_strategies import KINDS, corpora, event_streams, landing_line

LOCAL = DEFAULT.for_engine("local")
TANKS = RULES / "water_tanks.pomo"
HOURS = 4
Rows = dict[tuple[str, str], Counter]


def _steps(
    program_or_path, warehouse: Path, landing: Path, history, policy: Policy = LOCAL, units_of=None
) -> dict[str, tuple[str, ...]]:
    """The inputs and every unit over ``history``, as a Dagster run of those partitions
    does; the epochs each unit kept, by unit."""
    program = (
        program_or_path if not isinstance(program_or_path, Path) else load_program(program_or_path)
    )
    pipeline = Pipeline(program, Storage(str(warehouse), str(landing), times="any"))
    driver, run = pipeline.driver(history, len(history), policy)
    pipeline.land(driver, run)
    kept = {}
    for unit in units(program):
        if units_of is None or unit.name in units_of:
            kept[unit.name] = pipeline.evaluate(driver, unit, run).kept
    return kept


def _rows(warehouse: Path, program) -> Rows:
    """Every stored partition's rows of every derived relation (floats to 9 digits)."""
    out: Rows = {}
    for rel in (r.name for r in program.catalog if r.derived):
        for folder in sorted((warehouse / program.name / rel).glob("epoch=*")):
            rows: Counter = Counter()
            for f in folder.glob("*.parquet"):
                for row in pq.read_table(f).to_pylist():
                    rows[tuple((k, _digits(v)) for k, v in sorted(row.items()))] += 1
            if rows:
                out[(rel, folder.name)] = rows
    return out


def _digits(value: object) -> object:
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.9g}")
    if isinstance(value, list):
        return tuple(_digits(v) for v in value)
    return value


def _tanks(folder: Path) -> Path:
    folder.mkdir(parents=True)
    water_tank_events(folder / "readings.jsonl", 2_400, hours=HOURS)
    return folder


def _reading(folder: Path, name: str, t: int, level: float = 95.0) -> None:
    line = {"relation": "water_level", "t": t, "args": ["north", level]}
    (folder / name).write_text(json.dumps(line) + "\n")


HISTORY = epochs(DEFAULT_START, DEFAULT_START + HOURS * HOUR, HOUR)
KEYS = [epoch_key(e) for e in HISTORY]


def _scratch(tmp_path: Path, landing: Path, program_path: Path = TANKS, history=HISTORY) -> Rows:
    program = load_program(program_path)
    _steps(program, tmp_path / "scratch", landing, history)
    return _rows(tmp_path / "scratch", program)


@pytest.mark.parametrize(
    "minute, kept_from, engine",
    # a reading in the middle of hour 1, and one living into hour 2; on Spark's plans,
    # which store a range of epochs in one pass
    [(20, 2, "local"), (55, 3, "local"), (55, 3, "spark")],
)
def test_a_late_reading_evaluates_the_epochs_it_reaches_and_keeps_the_rest(
    tmp_path: Path, minute: int, kept_from: int, engine: str
) -> None:
    policy = DEFAULT.for_engine(engine)
    landing = _tanks(tmp_path / "landing")
    _steps(TANKS, tmp_path / "wh", landing, HISTORY, policy)
    _reading(landing, "late.jsonl", DEFAULT_START + HOUR + minute * 60_000)
    kept = _steps(TANKS, tmp_path / "wh", landing, HISTORY, policy)
    # The ten-minute averages: the epochs before the reading (nothing it changes lives
    # there) and from `kept_from` on are kept; what follows from them keeps those at least
    # (more where the new averages change nothing it derives). Spark sums an average's
    # terms in another order in a pass of another length, so its new averages may differ
    # in the last bit all over the epochs it evaluates: what follows from them is then
    # evaluated where those live.
    assert kept["level_10m"] == (KEYS[0], *KEYS[kept_from:])
    unit = "near_capacity"
    assert set(kept[unit]) >= {KEYS[0], *KEYS[kept_from:]} or engine == "spark", unit
    assert KEYS[0] in kept[unit]
    # Per-minute levels, high minutes, their memory and the alerts are stamped by an
    # explicit `@time`, which may defer events to a later epoch (the memory a minute on):
    # those are recorded as versions of their own, so these too keep what nothing reaches.
    assert kept["level_per_minute"] == (KEYS[0], *KEYS[kept_from:]) or engine == "spark"
    for unit in ("level_per_minute", "high_minute", "was_high", "overflow_alert"):
        assert KEYS[0] in kept[unit], unit
    assert _rows(tmp_path / "wh", load_program(TANKS)) == _scratch(tmp_path, landing)


def test_an_event_that_never_expires_reaches_every_later_epoch(tmp_path: Path) -> None:
    corpus = tmp_path / "totals.pomo"
    corpus.write_text(
        ".decl sale(shop: str, n: int);\n"
        "seen(shop) := sale(shop, _);\n"
        "total(shop) @count := seen(shop);\n"
    )
    landing = tmp_path / "landing"
    landing.mkdir()
    lines = [
        {"relation": "sale", "t": e.start + 5, "args": ["a", i]} for i, e in enumerate(HISTORY)
    ]
    (landing / "sales.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    _steps(corpus, tmp_path / "wh", landing, HISTORY)
    late = {"relation": "sale", "t": HISTORY[1].start + 7, "args": ["b", 9]}
    (landing / "late.jsonl").write_text(json.dumps(late) + "\n")
    kept = _steps(corpus, tmp_path / "wh", landing, HISTORY)
    assert all(k == (KEYS[0],) for k in kept.values()), kept
    assert _rows(tmp_path / "wh", load_program(corpus)) == _scratch(tmp_path, landing, corpus)


def test_a_late_event_that_expires_at_an_epochs_start_evaluates_that_epoch(
    tmp_path: Path,
) -> None:
    """A late event living until exactly the start of a later epoch: nothing of it is alive
    there, but a count that included it changes at that instant, and the change is that
    epoch's result."""
    corpus = (
        ".decl a(x: int) lifetime 10;\n"
        ".decl n(x: int, v: int) lifetime 3;\n"
        "n(x, v) := a(x) ^ v = count : a(x);\n"
    )
    kept = _late_a(tmp_path, corpus, early=(27, 0), late=(26, 0))
    assert "36" not in kept["n"], kept


def test_an_event_deferred_to_a_later_epoch_evaluates_that_epoch_alone(tmp_path: Path) -> None:
    """A late event whose consequence is stamped five ticks on, past its epoch's end (and
    past its own short life): the epoch the consequence falls in is evaluated, the others
    kept."""
    corpus = ".decl a(x: int) lifetime 1;\nd(x) @time(t + 5) := a(x) @time(t);\n"
    kept = _late_a(tmp_path, corpus, early=(3, 0), late=(10, 1))
    assert kept["d"] == ("24", "36"), kept


def _late_a(tmp_path: Path, text: str, early: tuple[int, int], late: tuple[int, int]) -> dict:
    """``text`` over an event ``a(x)`` (time, x), every epoch of `SMALL` evaluated, then a
    late one: what each unit kept the second time. Every partition is then what a run from
    scratch stores."""
    corpus = tmp_path / "late.pomo"
    corpus.write_text(text)
    landing = tmp_path / "landing"
    landing.mkdir()
    for name, (t, x) in (("early", early), ("late", late)):
        (landing / f"{name}.jsonl").write_text(
            json.dumps({"relation": "a", "t": t, "args": [x]}) + "\n"
        )
        kept = _steps(corpus, tmp_path / "wh", landing, SMALL)
    assert _rows(tmp_path / "wh", load_program(corpus)) == _scratch(
        tmp_path, landing, corpus, SMALL
    )
    return kept


def test_a_changed_corpus_evaluates_every_epoch_again(tmp_path: Path) -> None:
    landing = _tanks(tmp_path / "landing")
    _steps(TANKS, tmp_path / "wh", landing, HISTORY)
    again = _steps(TANKS, tmp_path / "wh", landing, HISTORY)
    assert again["level_10m"] == tuple(KEYS), "nothing new: every epoch kept"
    changed = tmp_path / "water_tanks.pomo"
    changed.write_text(TANKS.read_text().replace("0.9 * max_level", "0.5 * max_level"))
    kept = _steps(changed, tmp_path / "wh", landing, HISTORY)
    assert all(k == () for k in kept.values()), kept
    assert _rows(tmp_path / "wh", load_program(changed)) == _scratch(tmp_path, landing, changed)


def test_a_step_that_missed_an_upstream_version_evaluates_what_it_reaches(tmp_path: Path) -> None:
    """A run stopped after the averages' step: the next run's averages step keeps every
    epoch (its inputs are as it last saw them), and the step after it still evaluates the
    epoch the late reading reached."""
    landing = _tanks(tmp_path / "landing")
    _steps(TANKS, tmp_path / "wh", landing, HISTORY)
    _reading(landing, "late.jsonl", DEFAULT_START + HOUR + 20 * 60_000, level=400.0)
    _steps(TANKS, tmp_path / "wh", landing, HISTORY, units_of={"level_10m"})
    kept = _steps(TANKS, tmp_path / "wh", landing, HISTORY)
    assert kept["level_10m"] == tuple(KEYS)
    assert KEYS[1] not in kept["near_capacity"]
    assert _rows(tmp_path / "wh", load_program(TANKS)) == _scratch(tmp_path, landing)


def test_reach_switched_off_evaluates_every_epoch(tmp_path: Path) -> None:
    from dagster_pomo.orchestration.resources import SparkResource

    landing = _tanks(tmp_path / "landing")
    _steps(TANKS, tmp_path / "wh", landing, HISTORY)
    off = SparkResource(engine="local", reach=False).policy()
    assert all(k == () for k in _steps(TANKS, tmp_path / "wh", landing, HISTORY, off).values())
    on = SparkResource(engine="local").policy()
    assert _steps(TANKS, tmp_path / "wh", landing, HISTORY, on)["level_10m"] == tuple(KEYS)


# ------------------------------------------------------------------ generated cases

TIMELESS = tuple(k for k in KINDS if k not in ("next", "async"))
SMALL = epochs(0, 48, 12)


@st.composite
def late_events(draw: st.DrawFn, early: list) -> list:
    """A few late events: new ones, and events of the early stream's relations and
    arguments at other times (so that they join what landed before)."""
    fresh = draw(event_streams(max_events=3))
    if not early:
        return fresh
    again = st.tuples(st.sampled_from(early), st.integers(0, 40))
    moved = [(e[0], t, e[2]) for e, t in draw(st.lists(again, max_size=3))]
    return fresh + moved


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(corpora(TIMELESS), event_streams(), st.data())
def test_late_events_leave_what_a_run_from_scratch_stores(
    tmp_path_factory, corpus: str, early, data
) -> None:
    """Generated corpora; events landed, every epoch evaluated, then late events (and
    delete lines for some of the earlier ones) landed and the epochs evaluated again with
    reach: every partition is what a run from scratch over all the lines stores."""
    tmp = tmp_path_factory.mktemp("reach")
    program = compile_corpus(corpus, "generated.pomo")
    columns = {r.name: r.columns for r in program.catalog.inputs}

    def write(name: str, events, deletes=()) -> None:
        lines = [landing_line(e, columns.get(e[0], ())) for e in events]
        lines += [
            json.dumps({"relation": e[0], "t": e[1], "args": e[2], "op": "delete"}) for e in deletes
        ]
        (tmp / "landing" / name).write_text("".join(x + "\n" for x in lines))

    (tmp / "landing").mkdir()
    write("early.jsonl", early)
    program_path = tmp / "generated.pomo"
    program_path.write_text(corpus)
    _steps(program_path, tmp / "wh", tmp / "landing", SMALL)
    late = data.draw(late_events(early))
    distinct = sorted({(e[0], e[1], tuple(e[2])) for e in early})
    deletes = (
        data.draw(st.lists(st.sampled_from(distinct), max_size=2, unique=True)) if distinct else []
    )
    write("late.jsonl", late, [(r, t, list(a)) for r, t, a in deletes])
    _steps(program_path, tmp / "wh", tmp / "landing", SMALL)
    _steps(program_path, tmp / "scratch", tmp / "landing", SMALL)
    assert _rows(tmp / "wh", program) == _rows(tmp / "scratch", program)
