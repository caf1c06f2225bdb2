"""The inputs step keeps the input epochs whose landing files are unchanged, adds a new
file's events to the epochs it holds, and reads again what anything else changed: what it
stores is always what reading every file stores."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_pomo.engine.pipeline import Landing, Pipeline, Storage
from dagster_pomo.engine.policy import DEFAULT
from dagster_pomo.lang import compile_corpus
from dagster_pomo.timeline import epochs

CORPUS = ".decl a(x: int, y: str) lifetime 10;\n.decl b(x: int);\nc(x) := a(x, _) ^ !b(x);\n"
HISTORY = epochs(0, 48, 12)
LOCAL = DEFAULT.for_engine("local")


def _land(warehouse: Path, landing: Path, first: int = 0, last: int = 3) -> Landing:
    """The inputs step of a run of epochs ``first`` to ``last`` (as a Dagster run of those
    partitions has it)."""
    program = compile_corpus(CORPUS, "inputs.pomo")
    pipeline = Pipeline(program, Storage(str(warehouse), str(landing), times="any"))
    driver, _ = pipeline.driver(HISTORY, len(HISTORY), LOCAL)
    return pipeline.land(driver, HISTORY[first : last + 1])


def _inputs(warehouse: Path) -> dict[tuple[str, str], Counter]:
    """Every stored input partition's rows."""
    out = {}
    for rel in ("a", "b"):
        for folder in sorted((warehouse / "inputs" / rel).glob("epoch=*")):
            rows: Counter = Counter()
            for f in folder.glob("*.parquet"):
                rows.update(tuple(sorted(r.items())) for r in pq.read_table(f).to_pylist())
            if rows:
                out[(rel, folder.name)] = rows
    return out


def _write(path: Path, events: list[tuple], deletes: list[tuple] = ()) -> None:
    lines = [{"relation": r, "t": t, "args": list(a)} for r, t, a in events]
    lines += [{"relation": r, "t": t, "args": list(a), "op": "delete"} for r, t, a in deletes]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def _scratch(tmp: Path, landing: Path) -> dict[tuple[str, str], Counter]:
    _land(tmp / "scratch", landing)
    return _inputs(tmp / "scratch")


def test_a_late_file_is_all_a_run_reads_and_its_epoch_all_it_stores(tmp_path: Path) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    day = [("a", t, (t % 3, "x")) for t in range(48)]
    _write(landing / "day.jsonl", day)
    _land(tmp_path / "wh", landing)
    stored = {f: f.stat().st_mtime_ns for f in (tmp_path / "wh").rglob("epoch=*/*.parquet")}
    _write(landing / "late.jsonl", [("a", 13, (7, "late")), ("b", 14, (7,))])
    landed = _land(tmp_path / "wh", landing, 1, 3)
    # The late file alone is read; the day's file is known unchanged.
    assert landed.ingested.files_read == 1
    assert landed.ingested.lines_read - landed.ingested.lines_kept == 2
    after = {f: f.stat().st_mtime_ns for f in (tmp_path / "wh").rglob("epoch=*/*.parquet")}
    rewritten = {f.parent.name for f in after if stored.get(f) != after[f]}
    assert rewritten == {"epoch=12"}, rewritten
    assert landed.counts == {"a": 37, "b": 1}
    assert _inputs(tmp_path / "wh") == _scratch(tmp_path, landing)
    # The data versions are those of a step that read every file.
    assert landed.digests == _land(tmp_path / "again", landing, 1, 3).digests


def test_a_late_file_over_two_epochs_run_one_partition_at_a_time(tmp_path: Path) -> None:
    """Each partition of a late file's epochs materialized in a run of its own: the second
    run's epoch gains the late events, though the first run already knew the file."""
    landing = tmp_path / "landing"
    landing.mkdir()
    _write(landing / "day.jsonl", [("a", t, (1, "x")) for t in range(0, 48, 5)])
    _land(tmp_path / "wh", landing)
    _write(landing / "late.jsonl", [("a", 13, (2, "y")), ("a", 30, (2, "y"))])
    _land(tmp_path / "wh", landing, 1, 1)
    _land(tmp_path / "wh", landing, 2, 2)
    assert _inputs(tmp_path / "wh") == _scratch(tmp_path, landing)


def test_a_delete_line_in_an_old_file_applies_to_an_event_a_new_file_lands(
    tmp_path: Path,
) -> None:
    """A delete line that found nothing when it landed withdraws the event a later file
    brings (delete lines apply whichever file holds the event, before or after)."""
    landing = tmp_path / "landing"
    landing.mkdir()
    _write(landing / "day.jsonl", [("a", 3, (1, "x"))], deletes=[("a", 5, (1, "x"))])
    landed = _land(tmp_path / "wh", landing)
    assert landed.ingested.quarantined_count == 1
    _write(landing / "late.jsonl", [("a", 5, (1, "x"))])
    landed = _land(tmp_path / "wh", landing)
    assert landed.ingested.quarantined_count == 0
    assert _inputs(tmp_path / "wh") == _scratch(tmp_path, landing)


EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]), st.integers(0, 47), st.integers(0, 2), st.sampled_from("xy")
    ),
    max_size=8,
)
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["new", "rewrite", "remove", "touch"]),
        EVENTS,
        st.lists(st.integers(0, 7), max_size=2),  # which events of earlier files to delete
        st.integers(0, 3),
        st.integers(0, 3),
    ),
    min_size=1,
    max_size=5,
)


def _event(e: tuple) -> tuple:
    rel, t, x, y = e
    return (rel, t, (x, y) if rel == "a" else (x,))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(EVENTS, STEPS)
def test_any_landing_history_stores_what_reading_every_file_stores(
    tmp_path_factory, first: list, steps: list
) -> None:
    """Generated landings: files added (with delete lines for earlier events), rewritten,
    removed or touched, each followed by the inputs step of some epochs, as partitions
    are materialized; then of every epoch. Every stored input epoch is what one step
    reading every file stores."""
    tmp = tmp_path_factory.mktemp("inputs")
    landing = tmp / "landing"
    landing.mkdir()
    files: dict[str, list[tuple]] = {"f0.jsonl": [_event(e) for e in first]}
    _write(landing / "f0.jsonl", files["f0.jsonl"])
    _land(tmp / "wh", landing)
    for i, (op, events, deleted, lo, hi) in enumerate(steps, start=1):
        earlier = [e for rows in files.values() for e in rows]
        gone = [earlier[k % len(earlier)] for k in deleted] if earlier else []
        name = sorted(files)[i % len(files)] if files else None
        if op == "new" or name is None:
            name = f"f{i}.jsonl"
            files[name] = [_event(e) for e in events]
            _write(landing / name, files[name], gone)
        elif op == "rewrite":
            files[name] = [_event(e) for e in events]
            _write(landing / name, files[name], gone)
        elif op == "remove":
            del files[name]
            (landing / name).unlink()
        else:  # the same content written again: another signature
            (landing / name).write_text((landing / name).read_text())
        _land(tmp / "wh", landing, min(lo, hi), max(lo, hi))
    _land(tmp / "wh", landing)
    assert _inputs(tmp / "wh") == _scratch(tmp, landing)
