"""A large landing read by Spark's tasks (`engine.spark.landing`): what they accept and
quarantine, under which line numbers, and what the run derives and writes from it, is what
this process's reader (`ingest.ingest_files`) gives, however the files are cut in pieces."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_pomo.engine import lines
from dagster_pomo.engine.ingest import Quarantined, ingest_files, read_piece
from dagster_pomo.engine.lines import DEFAULT_TIMES, cut, newlines, numbered
from dagster_pomo.engine.policy import Policy
from dagster_pomo.engine.run import run
from dagster_pomo.lang import compile_corpus
from tests.test_hostile_input import BAD, CORPUS, GOOD, T, _landing

HERE = Policy(spark_landing_bytes=-1)  # this process reads the landing
SPARK = Policy(spark_landing_bytes=0)  # Spark's tasks read any landing


def _pieces(path: Path, size: int) -> list[lines.Piece]:
    """``path`` cut as a run cuts it, the newlines before each piece counted here."""
    pieces = cut(path, size)
    counts = {p: newlines(path, p.start, p.end) for p in pieces if p.end is not None}
    return numbered(pieces, counts)


def _read_in_pieces(program, path: Path, size: int) -> None:
    """Reading ``path`` in pieces of ``size`` bytes gives each line once, under its number
    in the file, accepted or quarantined as reading the whole file does."""
    whole = ingest_files(program, [path], DEFAULT_TIMES)
    # The types values are read as: declared, else what the whole file's values decided.
    types = {
        rel.name: tuple(d or s for d, s in zip(rel.types, whole.types[rel.name], strict=True))
        for rel in program.catalog.inputs
    }
    accepted, bad = [], []
    for piece in _pieces(path, size):
        for event in read_piece(program, piece, types, DEFAULT_TIMES):
            if isinstance(event, Quarantined):
                bad.append(event)
            else:
                rel, values, t, _ = event
                accepted.append((rel.name, values, t))
    assert bad == whole.quarantined
    # Each piece gives every line's event; the whole file keeps each event once.
    expected = [(name, v.args, v.t) for name, rows in whole.events.items() for v in rows]
    assert len(accepted) == len(expected) + whole.repeats
    assert sorted(set(accepted), key=repr) == sorted(expected, key=repr)


SHORT = [line for line in [*GOOD, *BAD] if len(line) < 200]
SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(
    size=st.integers(1, 64),
    bom=st.booleans(),
    rows=st.lists(
        st.tuples(st.sampled_from([*SHORT, "", " "]), st.sampled_from(["\n", "\r\n", "\r"])),
        max_size=12,
    ),
    last=st.booleans(),
)
def test_a_file_cut_anywhere_reads_as_the_whole_file(
    tmp_path: Path, size: int, bom: bool, rows: list[tuple[str, str]], last: bool
) -> None:
    """Cut anywhere, even inside a BOM, a CRLF or a character: each line once, under its
    number, with the whole file's reason."""
    text = "".join(line + end for line, end in rows)
    raw = (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8", errors="surrogatepass")
    if not last:
        raw = raw.removesuffix(b"\n")  # a last line with no newline
    path = tmp_path / "cut.jsonl"
    path.write_bytes(raw)
    _read_in_pieces(compile_corpus(CORPUS, "hostile.pomo"), path, size)


@SETTINGS
@given(size=st.integers(200, 20_000))
def test_the_hostile_file_cut_in_pieces_reads_as_the_whole_file(tmp_path: Path, size: int) -> None:
    """The hostile landing (every kind of bad line, long ones too) cut in pieces."""
    path, _ = _landing(tmp_path)
    _read_in_pieces(compile_corpus(CORPUS, "hostile.pomo"), path, size)


def _parquet_landing(folder: Path) -> None:
    """A Parquet file of several row groups, one argument a column (a bad row among them),
    and a file named as Parquet that is not."""
    rows = [
        {"relation": "level", "t": T + i, "tank": f"t{i % 7}", "value": float(i % 120)}
        for i in range(500)
    ]
    rows[123]["t"] = 5  # outside the accepted times
    rows[321]["relation"] = "nope"
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, folder / "levels.parquet", row_group_size=64)
    (folder / "broken.parquet").write_bytes(b"PAR1 not really")


@pytest.mark.parametrize("place", ["in-place", "scratch"])
@pytest.mark.parametrize("span", [(None, None), (T + 200, T + 300)], ids=["whole", "start-until"])
def test_spark_reads_a_landing_as_this_process_does(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    span: tuple[int | None, int | None],
    place: str,
) -> None:
    """Every file kind and every kind of bad line, cut in many pieces read by several
    tasks: the same outputs and quarantine, byte for byte, the same counts, and no event
    held in this process. The tasks write the events in their epochs' files themselves
    (they see the warehouse's disk), or into a scratch folder (as on a cluster)."""
    from dagster_pomo.engine.spark import landing

    made, staged = [], landing.staged

    @contextmanager
    def seen(*args: Any, **kwargs: Any) -> Iterator[landing.Staged]:
        with staged(*args, **kwargs) as read:
            made.append(type(read))
            yield read

    monkeypatch.setattr(landing, "staged", seen)
    if place == "scratch":  # as where the tasks do not see this machine's disk
        monkeypatch.setattr(landing, "runs_here", lambda spark: False)
    monkeypatch.setattr(landing, "PIECE_BYTES", 4096)
    monkeypatch.setattr(lines, "PIECE_ROWS", 100)
    folder = tmp_path / "landing"
    folder.mkdir()
    _landing(folder)
    (folder / "more.jsonl").write_text("\n".join(GOOD * 40) + "\n", encoding="utf-8")
    _parquet_landing(folder)
    assert len([p for f in folder.iterdir() for p in cut(f, 4096)]) > 80
    program = compile_corpus(CORPUS, "hostile.pomo")
    start, until = span
    got = {}
    for name, policy in (("here", HERE), ("spark", SPARK)):
        out = tmp_path / name
        got[name] = run(program, folder, 60_000, start, until, policy=policy, out=out).ingested
    spark, here = got["spark"], got["here"]
    assert made == [landing.InPlace if place == "in-place" else landing.InScratch]
    inputs = [r.name for r in program.catalog.inputs]
    assert not any(spark.events.get(name) for name in inputs), "no event in this process"
    assert any(here.events.get(name) for name in inputs)
    assert (spark.lines_read, spark.accepted, spark.quarantined_count) == (
        here.lines_read,
        here.accepted,
        here.quarantined_count,
    )
    assert spark.quarantined == here.quarantined and len(here.quarantined) > 100
    files = sorted(p.name for p in (tmp_path / "here").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "spark").iterdir())
    for file in files:
        mine, theirs = (tmp_path / "here" / file), (tmp_path / "spark" / file)
        assert mine.read_bytes() == theirs.read_bytes(), file
    assert (tmp_path / "here" / "high.jsonl").stat().st_size > 0
    bad = [json.loads(line) for line in (tmp_path / "spark" / "_quarantine.jsonl").open()]
    assert {"levels.parquet", "broken.parquet", "hostile.jsonl"} <= {
        Path(b["file"]).name for b in bad
    }


def test_a_landing_of_bad_lines_only_runs_no_epoch_either_way(tmp_path: Path) -> None:
    """No event accepted, no fact: no epoch to run, empty outputs and every line in the
    quarantine, whoever reads the landing."""
    folder = tmp_path / "landing"
    folder.mkdir()
    (folder / "bad.jsonl").write_text("".join(f"{line}\n" for line in list(BAD)[:20]))
    program = compile_corpus(CORPUS, "hostile.pomo")
    outs = {}
    for name, policy in (("here", HERE), ("spark", SPARK)):
        outs[name] = tmp_path / name
        result = run(program, folder, 60_000, policy=policy, out=outs[name])
        assert not result.epoch_range.epochs
        assert result.ingested.quarantined_count == result.ingested.lines_read == 20
    for path in sorted(outs["here"].iterdir()):
        assert (outs["spark"] / path.name).read_bytes() == path.read_bytes(), path.name
    assert len((outs["spark"] / "_quarantine.jsonl").read_text().splitlines()) == 20


ARROW_CORPUS = """.decl m(s: str, x: float, n: int, b: bool) lifetime 10;
.decl k(s: str, n: int);
out(s) := m(s, x, n, b) ^ k(s, n);
"""
_WINDOW = lines.TimeWindow(0, 10_000)


def _event_line(draw: st.DrawFn) -> bytes:
    """A landing line: mostly an event of ``ARROW_CORPUS`` as JSON writes it, else one of
    the shapes only the line-by-line checks may judge (a missing, extra or null column,
    a value of another kind, args as a list, a time outside or as text, a repeated key,
    long or non-finite numbers, text escapes and non-ASCII text, a blank line, a bare CR)."""
    text = st.text(alphabet=st.sampled_from('ab é"\\\ud800\n'), max_size=4)
    values = {
        "s": text,
        "x": st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**6), 10**6),
        "n": st.integers(-(2**63), 2**63 - 1),
        "b": st.booleans(),
    }
    name = draw(st.sampled_from(["m", "k"]))
    columns = ["s", "x", "n", "b"] if name == "m" else ["s", "n"]
    args: dict[str, Any] = {c: draw(values[c]) for c in columns}
    event: dict[str, Any] = {"relation": name, "t": draw(st.integers(0, 9_999)), "args": args}
    change = draw(st.integers(0, 14))
    if change == 1:
        del args[draw(st.sampled_from(columns))]
    elif change == 2:
        args["x" if name == "k" else "z"] = 1.5
    elif change == 3:
        args[draw(st.sampled_from(columns))] = draw(st.sampled_from([None, "7", 7, 1.5, [1]]))
    elif change == 4:
        event["args"] = list(args.values())
    elif change == 5:
        event["t"] = draw(st.sampled_from([-1, 10_000, 2**63, "1970-01-01T00:00:01Z", 1.5]))
    elif change == 6:
        event["relation"] = draw(st.sampled_from(["out", "q", None]))
    raw = json.dumps(event, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    if change == 7:
        raw = raw.replace(b'"t": ', b'"t": 1, "t": ', 1)
    elif change == 8:
        raw = raw.replace(b'"n": ', b'"n": 1' + b"0" * draw(st.integers(17, 45)) + b', "q": ', 1)
    elif change == 9:
        raw = raw.replace(b"}}", b', "x": NaN}}' if name == "m" else b"}}")
    elif change == 10:
        raw = draw(st.sampled_from([b"", b"   ", b"{}", b"[1]", b"not json", b"\xff"]))
    elif change == 11:
        raw += b"\r" + raw
    return raw


@given(st.data())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_arrow_reads_a_piece_as_the_line_checks_do(tmp_path_factory, data: st.DataObject) -> None:
    """A landing task reads a piece with Arrow's JSON reader where that reads it as the
    line-by-line checks would: whatever the lines, pieces and line ends, both ways write
    the same events in the same epoch files and return the same tallies and bad lines."""
    from dagster_pomo.engine.ingest import input_types, stored_types
    from dagster_pomo.engine.spark import landing, landing_in_place
    from dagster_pomo.plan.schema import infer_schemas

    program = compile_corpus(ARROW_CORPUS, "arrow.pomo")
    types = input_types(program, {})
    schemas = infer_schemas(program, stored_types(types))
    inputs = [schemas[rel.name] for rel in program.catalog.inputs]
    count = data.draw(st.integers(1, 30))
    raw = b"\n".join(_event_line(data.draw) for _ in range(count))
    if data.draw(st.booleans()):
        raw = raw.replace(b"\n", b"\r\n")
    tmp = tmp_path_factory.mktemp("arrow")
    path = tmp / "landing.jsonl"
    path.write_bytes((b"\xef\xbb\xbf" if data.draw(st.booleans()) else b"") + raw + b"\n")
    pieces = list(enumerate(cut(path, data.draw(st.integers(40, 2_000)))))
    grid = landing.Grid(1_000, None)
    got = {}
    for arrow in (True, False):
        roots = [str(tmp / f"{arrow}" / s.name) for s in inputs]
        write = landing_in_place.writer(
            program, inputs, types, _WINDOW, grid, {}, [str(path)], True, roots, 7_000, arrow
        )
        tallies = sorted(map(repr, (r for b in write((0, pieces)) for r in b.to_pylist())))
        files = {
            str(f.relative_to(tmp / f"{arrow}")): pq.read_table(f).to_pylist()
            for f in sorted((tmp / f"{arrow}").rglob("*.parquet"))
        }
        got[arrow] = (files, tallies)
    assert got[True] == got[False]


def test_arrow_reads_clean_pieces_and_leaves_the_others_to_the_checks(tmp_path: Path) -> None:
    """Lines as JSON writes events are read by Arrow; a piece holding a line Arrow would read
    otherwise than the checks (here a null column) is not; nor a corpus with a `time`
    column (ISO text or milliseconds)."""
    from dagster_pomo.engine.arrow_lines import Layout, read_piece_arrow

    good = [
        {"relation": "m", "t": 5, "args": {"s": "é", "x": 1, "n": -3, "b": True}},
        {"relation": "k", "t": 6, "args": {"s": "a", "n": 2**63 - 1}},
    ]
    path = tmp_path / "l.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in good), encoding="utf-8")
    program = compile_corpus(ARROW_CORPUS, "arrow.pomo")
    names = [rel.name for rel in program.catalog.inputs]
    columns = {rel.name: rel.columns for rel in program.catalog.inputs}
    layout = Layout.of(names, columns, {"m": ("str", "float", "int", "bool"), "k": ("str", "int")})
    assert layout is not None
    read = read_piece_arrow(layout, lines.Piece(str(path)), _WINDOW)
    assert read is not None
    values = {r: ([c.to_pylist() for c in cs], t.tolist()) for r, (cs, t) in read.items()}
    assert values == {
        names.index("m"): ([["é"], [1.0], [-3], [True]], [5]),
        names.index("k"): ([["a"], [2**63 - 1]], [6]),
    }
    path.write_text(json.dumps({**good[1], "args": {"s": None, "n": 1}}) + "\n")
    assert read_piece_arrow(layout, lines.Piece(str(path)), _WINDOW) is None
    assert Layout.of(["w"], {"w": ("at",)}, {"w": ("time",)}) is None


REPEATS_CORPUS = """.decl level(tank: str, v: float);
.decl seen(tank: str);
seen("north") @time(1700000000000);
stats(tank) @count @sum(v) @average(v) := level(tank, v);
tanks() @count := seen(_);
"""


def _forms(tank: str, v: float, t: int) -> list[str]:
    """One event written as a landing line five ways: as JSON writes it, ISO time with an
    offset, arguments as a list, the relation's name escaped and spaces around, ``0.0`` as
    ``-0.0``. All five are one event (docs/semantics.md, "Input events")."""
    from datetime import UTC, datetime, timedelta

    offset = timedelta(hours=1)
    iso = (datetime.fromtimestamp(t / 1000, UTC) + offset).isoformat(timespec="milliseconds")
    iso = iso.replace("+00:00", "+01:00")
    value = -0.0 if v == 0 else v
    return [
        json.dumps({"relation": "level", "t": t, "args": {"tank": tank, "v": v}}),
        json.dumps({"relation": "level", "t": iso, "args": {"tank": tank, "v": v}}),
        json.dumps({"relation": "level", "t": t, "args": [tank, value]}),
        f'  {{ "relation" : "\\u006cevel", "args": {{"v": {value!r}, "tank": "{tank}"}}, '
        f'"t": {t} }}  ',
        json.dumps({"relation": "seen", "t": 1700000000000, "args": ["north"]}),
    ]


@pytest.mark.parametrize("place", ["in-place", "scratch"])
def test_a_repeated_event_counts_once_whoever_reads_the_landing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, place: str
) -> None:
    """Every event of a landing repeated in other files and other forms (an ISO time with
    an offset, a list of arguments, an escaped name, ``-0.0``, a fact landed as a line),
    read by this process, by Spark's tasks writing the epochs in place (the repeats in
    other tasks' pieces and in the facts' file) and into a scratch folder: the outputs are
    those of the landing with each event once, byte for byte, on Spark and the reference,
    and every repeat is counted as one."""
    from dagster_pomo.engine.spark import landing

    if place == "scratch":
        monkeypatch.setattr(landing, "runs_here", lambda spark: False)
    monkeypatch.setattr(landing, "PIECE_BYTES", 2048)
    t0, events = 1_700_000_000_000, []
    for i in range(60):
        events.append(("north" if i % 3 else "south", float(i % 7 - 3) * (i % 2), t0 + i * 37_000))
    once, twice = tmp_path / "once", tmp_path / "twice"
    once.mkdir()
    twice.mkdir()
    (once / "a.jsonl").write_text("".join(_forms(*e)[0] + "\n" for e in events))
    for form in range(5):  # each form a file: the same times in many tasks' pieces
        lines_of = [_forms(*e)[form] for e in events]
        (twice / f"{form}.jsonl").write_text("\n".join(lines_of) + "\n")
    program = compile_corpus(REPEATS_CORPUS, "repeats.pomo")
    expected = tmp_path / "expected"
    run(program, once, 3_600_000, policy=HERE, out=expected)
    stats = [json.loads(x) for x in (expected / "stats.jsonl").read_text().splitlines()]
    most = {s["args"][0]: s["aggregates"]["count"] for s in stats}
    assert most == {"north": 40, "south": 20}
    assert json.loads((expected / "tanks.jsonl").read_text())["aggregates"]["count"] == 1
    repeats = 3 * 60 + 60  # three more forms of each reading; the fact's line, 60 times
    for name, engine, policy in (
        ("here", "auto", HERE),
        ("spark", "auto", SPARK),
        ("reference", "reference", HERE),
    ):
        out = tmp_path / name
        got = run(program, twice, 3_600_000, engine=engine, policy=policy, out=out).ingested
        assert got.repeats == repeats, name
        assert got.lines_read == 300 and got.quarantined_count == 0, name
        for file in ("stats.jsonl", "tanks.jsonl"):
            assert (out / file).read_bytes() == (expected / file).read_bytes(), (name, file)


@pytest.mark.parametrize("place", ["in-place", "scratch"])
def test_a_delete_line_withdraws_its_event_whoever_reads_the_landing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, place: str
) -> None:
    """Delete lines (``"op": "delete"``, in any of the forms an event is written, before or
    after the line that adds the event, some repeated) withdraw their events: read by this
    process, by Spark's tasks writing the epochs in place and into a scratch folder, and by
    the reference, the outputs are those of the landing without those events, byte for
    byte. A delete line that names no event (nor a fact of the corpus) is quarantined with
    its reason, the same lines whoever reads; the counts agree."""
    from dagster_pomo.engine.ingest import NOTHING_TO_DELETE
    from dagster_pomo.engine.spark import landing

    if place == "scratch":
        monkeypatch.setattr(landing, "runs_here", lambda spark: False)
    monkeypatch.setattr(landing, "PIECE_BYTES", 2048)
    t0 = 1_700_000_000_000
    events = [("north" if i % 3 else "south", float(i % 7 - 3), t0 + i * 37_000) for i in range(90)]
    gone = events[::4]  # each fourth event withdrawn
    kept, full = tmp_path / "kept", tmp_path / "full"
    kept.mkdir()
    full.mkdir()
    (kept / "a.jsonl").write_text("".join(_forms(*e)[0] + "\n" for e in events if e not in gone))
    (full / "a.jsonl").write_text("".join(_forms(*e)[0] + "\n" for e in events))

    def delete(line: str) -> str:
        obj = json.loads(line)
        return json.dumps({**obj, "op": "delete"})

    deletes = [delete(_forms(*e)[i % 3]) for i, e in enumerate(gone)]
    deletes += deletes[:5]  # repeated
    deletes.append(delete(_forms("east", 1.0, t0)[0]))  # no such event
    deletes.append(delete(_forms("north", 0.0, t0)[4]))  # a fact of the corpus
    (full / "0-early.jsonl").write_text("\n".join(deletes[:12]) + "\n")  # before the adds
    (full / "z-late.jsonl").write_text("\n".join(deletes[12:]) + "\n")
    program = compile_corpus(REPEATS_CORPUS, "repeats.pomo")
    expected = tmp_path / "expected"
    run(program, kept, 3_600_000, policy=HERE, out=expected)
    seen = {}
    for name, engine, policy in (
        ("here", "auto", HERE),
        ("spark", "auto", SPARK),
        ("reference", "reference", HERE),
    ):
        out = tmp_path / name
        got = run(program, full, 3_600_000, engine=engine, policy=policy, out=out).ingested
        seen[name] = (got.lines_read, got.accepted, got.repeats, got.withdrawn)
        assert got.withdrawn == len(gone) and got.repeats == 5, name
        bad = [json.loads(x) for x in (out / "_quarantine.jsonl").read_text().splitlines()]
        assert [(Path(b["file"]).name, b["line"], b["reason"]) for b in bad] == [
            ("z-late.jsonl", len(deletes) - 12 - 1, NOTHING_TO_DELETE),
            ("z-late.jsonl", len(deletes) - 12, NOTHING_TO_DELETE),
        ], name
        for file in ("stats.jsonl", "tanks.jsonl"):
            assert (out / file).read_bytes() == (expected / file).read_bytes(), (name, file)
    assert seen["here"] == seen["spark"] == seen["reference"]
    lines_read, accepted, *_ = seen["here"]
    assert lines_read == accepted - 1 + 2, "the fact is accepted from no line; two are bad"
