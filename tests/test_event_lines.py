"""`pomo run --out` written from Arrow columns gives the bytes the one-event-at-a-time writer
gives: the same events (merged per identity), the same order, the same JSON text."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_pomo.engine import event_lines
from dagster_pomo.engine.local.arrow_schemas import arrow_schema
from dagster_pomo.engine.versions import event_object, from_record, merge_versions, output_order
from dagster_pomo.plan.schema import Schema
from dagster_pomo.timeline import NEVER

INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
FLOAT = st.floats(allow_nan=False, allow_infinity=False)
VALUES = {
    "int": st.integers(-3, 3) | INT64,
    "bool": st.booleans(),
    "str": st.sampled_from(["", "a", "b"]) | TEXT,
    # Whole numbers, the bounds where Python's text takes an exponent, and any float.
    "float": st.sampled_from([0.0, -0.0, 1.0, -2.0, 0.5, 1e-4, 9.999e-5, 1e10, 9999999999.5, 1e16])
    | st.integers(-(10**12), 10**12).map(float)
    | FLOAT,
}


@st.composite
def relations(draw: st.DrawFn) -> tuple[Schema, bool, list[tuple[object, ...]]]:
    """A relation of integers, booleans, floats and text, with or without aggregates, and stored
    versions of it: events with several versions each (one per ``kt``, as stored)."""
    types = draw(st.lists(st.sampled_from(sorted(VALUES)), max_size=3))
    aggregating = draw(st.booleans())
    aggregates = (
        tuple(
            (f"f{i}", f"key {i}", typ)
            for i, typ in enumerate(
                draw(st.lists(st.sampled_from(["int", "bool", "float"]), max_size=2))
            )
        )
        if aggregating
        else ()
    )
    schema = Schema("r", tuple(f"c{i}" for i in range(len(types))), tuple(types), aggregates)
    events = draw(
        st.lists(
            st.tuples(st.integers(-2, 2) | INT64, st.tuples(*[VALUES[t] for t in types])),
            max_size=12,
            unique_by=lambda event: (event[0], repr(event[1])),  # 0.0 and -0.0 both
        )
    )
    records = []
    for t, args in events:
        kts = draw(st.lists(st.integers(-5, 5), min_size=1, max_size=3, unique=True))
        for kt in kts:
            aggs = tuple(draw(VALUES[typ]) for _, _, typ in aggregates)
            exp = draw(st.sampled_from([NEVER, kt + 1]) | INT64)
            tau = draw(st.integers(-5, 5))
            records.append((*args, *aggs, t, kt, exp, tau))
    records = draw(st.permutations(records))
    return schema, aggregating, records


def _assert_written(
    path: Path, written: int, records: list[tuple[object, ...]], schema: Schema, aggregating: bool
) -> None:
    """``path`` holds the lines the event-by-event writer makes of ``records``, and
    ``written`` counts them."""
    keys = [key for _, key, _ in schema.aggregates]
    versions = [from_record(r, schema) for r in records]
    events = sorted(merge_versions(versions, aggregating), key=output_order)
    expected = "".join(json.dumps(event_object(e, keys, False)) + "\n" for e in events)
    assert path.read_text(encoding="utf-8") == expected
    assert written == len(events)


@given(relations(), st.sampled_from([1, 3, event_lines.SLICE]))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_arrow_lines_are_the_bytes_of_the_event_by_event_writer(
    tmp_path_factory: object, relation: tuple[Schema, bool, list[tuple[object, ...]]], cut: int
) -> None:
    """The lines are the same whatever the slice of events formatted at once (``cut``)."""
    schema, aggregating, records = relation
    keys = [key for _, key, _ in schema.aggregates]
    arrow = arrow_schema(schema)
    table = pa.Table.from_pylist([dict(zip(arrow.names, r, strict=True)) for r in records], arrow)
    # As several epochs' files are read: the columns in chunks.
    table = pa.concat_tables([table.slice(0, cut), table.slice(cut)])
    path = Path(tmp_path_factory.mktemp("out")) / "r.jsonl"  # type: ignore[attr-defined]
    assert event_lines.writes(schema)
    whole = event_lines.SLICE
    event_lines.SLICE = cut
    try:
        written = event_lines.write([lambda: table], schema, aggregating, keys, path)
    finally:
        event_lines.SLICE = whole
    _assert_written(path, written, records, schema, aggregating)


@given(relations(), st.integers(1, 12), st.integers(1, 4), st.randoms(use_true_random=False))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_relation_read_a_range_of_times_at_a_time_gives_the_same_lines(
    tmp_path_factory: object,
    relation: tuple[Schema, bool, list[tuple[object, ...]]],
    held: int,
    files: int,
    rnd: random.Random,
) -> None:
    """Its versions stored in several files (an event's versions in any of them), read
    in ranges of times of about ``held`` versions each (`time_slices`, from each file's
    rows and least and greatest time): every range's files read with that range's filter
    write what the whole relation at once writes."""
    schema, aggregating, records = relation
    keys = [key for _, key, _ in schema.aggregates]
    arrow = arrow_schema(schema)
    rows = [dict(zip(arrow.names, r, strict=True)) for r in records]
    owner = [rnd.randrange(files) for _ in rows]
    stored = {
        f"f{i}": pa.Table.from_pylist(
            [r for r, o in zip(rows, owner, strict=True) if o == i], arrow
        )
        for i in range(files)
    }
    times = {
        name: (t.num_rows, *((pc.min(t["t"]).as_py(), pc.max(t["t"]).as_py())))
        for name, t in stored.items()
    }
    slices = event_lines.time_slices(times, held)
    bounds = [lo for lo, _, _ in slices[1:]]
    assert bounds == sorted(set(bounds)), "ranges in order, none empty by construction"

    def read(lo: int | None, hi: int | None, names: list[str]) -> pa.Table:
        parts = [stored[n] for n in names]
        table = pa.concat_tables(parts) if parts else arrow.empty_table()
        keep = pc.and_(
            pc.greater_equal(table["t"], lo if lo is not None else -(2**63)),
            pc.less(table["t"], hi) if hi is not None else pc.is_valid(table["t"]),
        )
        return table.filter(keep)

    reads = [lambda s=s: read(*s) for s in slices]
    path = Path(tmp_path_factory.mktemp("out")) / "r.jsonl"  # type: ignore[attr-defined]
    written = event_lines.write(reads, schema, aggregating, keys, path)
    _assert_written(path, written, records, schema, aggregating)


def test_events_of_many_repeated_versions_are_found_dense_or_sparse(tmp_path: Path) -> None:
    """Versions that all live forever (a closure's paths), each event several times over:
    the events are the distinct keys, found by a table of their range where they are dense
    in it and by sorting where they are not; both give the event-by-event writer's bytes."""
    schema = Schema("path", ("a", "b"), ("int", "int"), ())
    arrow = arrow_schema(schema)
    for spread in (60, 10**6):  # 60 nodes of 120 numbers, then of two million
        rnd = random.Random(spread)
        nodes = rnd.sample(range(-spread, spread), 60)
        records = [(rnd.choice(nodes), rnd.choice(nodes), 7, 7, NEVER, 7) for _ in range(20_000)]
        table = pa.Table.from_pylist(
            [dict(zip(arrow.names, r, strict=True)) for r in records], arrow
        )
        path = tmp_path / f"path{spread}.jsonl"
        written = event_lines.write([lambda t=table: t], schema, False, [], path)
        _assert_written(path, written, records, schema, False)
        assert 3_500 < written <= 3_600  # of 60 x 60 pairs


def test_sets_and_provenance_are_left_to_the_other_writers() -> None:
    assert not event_lines.writes(Schema("r", ("x",), ("int",), (("collect", "k", "set<int>"),)))
    assert not event_lines.writes(Schema("r", ("x",), ("int",), provenance=True))
    assert event_lines.writes(Schema("r", ("x", "y", "z", "f"), ("int", "bool", "str", "float")))
