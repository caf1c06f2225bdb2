"""Input events: every line is either accepted or quarantined with its reason, never lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_pomo.engine.ingest import _coerce_plain, coerce, ingest_files
from dagster_pomo.engine.lines import ANY_TIME, _quick, decode
from dagster_pomo.engine.versions import Version, digest
from dagster_pomo.lang import compile_corpus
from dagster_pomo.timeline import parse_duration, parse_time, show_duration, show_time

CORPUS = """.decl water_level(tank: str, level: float) lifetime 10m;
.decl maintenance(tank: str, since: time);
high(tank, level) := water_level(tank, level) if level > 90.0;
undeclared_use(x) := sensor(x, _);
"""

GOOD = [
    '{"relation": "water_level", "t": 1000, "args": {"tank": "t1", "level": 95.5}}',
    '{"relation": "water_level", "t": "2024-01-01T00:00:01Z", "args": ["t2", 91]}',
    '{"relation": "maintenance", "t": 5, "args": ["t1", "1970-01-01T00:00:00.004Z"]}',
    '{"relation": "sensor", "t": 7, "args": [1, "a"]}',
]
BAD = {
    "not json at all": "invalid JSON",
    '["relation", "water_level"]': "an event must be a JSON object",
    '{"t": 3, "args": []}': 'missing "relation"',
    '{"relation": "pressure", "t": 3, "args": []}': (
        "unknown relation `pressure`; the corpus takes events of `water_level`, `maintenance`,"
        " `sensor`"
    ),
    '{"relation": "water_levl", "t": 3, "args": []}': (
        "unknown relation `water_levl`; did you mean `water_level`?"
    ),
    '{"relation": "high", "t": 3, "args": ["t1", 99.0]}': "`high` is derived by rules",
    '{"relation": "water_level", "args": ["t1", 1.0]}': 'missing time "t"',
    '{"relation": "water_level", "t": "yesterday", "args": ["t1", 1.0]}': "invalid time",
    '{"relation": "water_level", "t": 3, "args": ["t1"]}': "takes 2 arguments, this has 1",
    '{"relation": "water_level", "t": 3, "args": {"tank": "t1"}}': "missing `level`",
    '{"relation": "water_level", "t": 3, "args": ["t1", "high"]}': 'is float: got "high", a string',
    '{"relation": "water_level", "t": 3, "args": [7, 1.0]}': "is str: got 7, an integer",
    '{"relation": "water_level", "t": 3, "args": ["t1", null]}': "must be a number, string",
    '{"relation": "water_level", "t": 3, "args": "t1"}': '"args" must be an object or a list',
    '{"relation": "sensor", "t": 8, "args": ["x", "a"]}': "(inferred from the data)",
    '{"relation": "water_level", "t": 3, "args": ["t1", NaN]}': "NaN is not a JSON number",
    '{"relation": "water_level", "t": 3, "args": ["t1", -Infinity]}': "-Infinity is not a JSON",
}


def test_every_line_is_accepted_or_quarantined_with_its_reason(tmp_path: Path) -> None:
    program = compile_corpus(CORPUS, "tanks.pomo")
    lines = []
    for i, bad in enumerate(BAD):
        lines.append(GOOD[i % len(GOOD)] if i < len(GOOD) else "")  # blank lines are skipped
        lines.append(bad)
    path = tmp_path / "landing.jsonl"
    path.write_text("\n".join(lines) + "\n")

    ingested = ingest_files(program, [path], ANY_TIME)

    assert ingested.lines_read == len(GOOD) + len(BAD)
    assert ingested.accepted + len(ingested.quarantined) == ingested.lines_read
    assert ingested.accepted == len(GOOD)
    by_text = {q.text: q for q in ingested.quarantined}
    assert set(by_text) == set(BAD)
    for text, reason in BAD.items():
        q = by_text[text]
        assert reason in q.reason, (text, q.reason)
        assert lines[q.line - 1] == text and q.file == str(path)


def test_values_are_typed_as_declared(tmp_path: Path) -> None:
    program = compile_corpus(CORPUS, "tanks.pomo")
    path = tmp_path / "landing.jsonl"
    path.write_text("\n".join(GOOD) + "\n")
    events = ingest_files(program, [path], ANY_TIME).events
    second = events["water_level"][1]
    assert second.args == ("t2", 91.0) and isinstance(second.args[1], float)
    assert second.t == parse_time("2024-01-01T00:00:01Z") == 1_704_067_201_000
    assert second.exp == second.t + 600_000
    assert events["maintenance"][0].args == ("t1", 4)
    assert events["sensor"][0].args == (1, "a")


def test_iso_times_with_offsets() -> None:
    assert parse_time("1970-01-01T01:00:00+01:00") == 0
    assert parse_time("1970-01-01 00:00:00.250") == 250
    assert parse_time(1_700_000_000_000) == 1_700_000_000_000


@given(st.integers(-62_135_596_800_000, 253_402_300_799_999))  # the years 1 to 9999
def test_times_shown_to_people_read_back_as_the_same_time(t: int) -> None:
    shown = show_time(t)
    assert shown.endswith("Z") and parse_time(shown) == t


@given(st.integers(1, 10**12))
def test_durations_shown_read_back_as_the_same_duration(ms: int) -> None:
    shown = show_duration(ms)
    assert parse_duration(shown) == ms
    assert shown == min((shown, f"{ms}ms"), key=len)  # never longer than plain milliseconds


def test_files_known_to_hold_nothing_in_the_span_are_not_read_again(tmp_path: Path) -> None:
    """A run over the latest epochs reads the files that may hold their events, and any file
    that is new or changed; the others count, and keep their bad lines, from what was known."""
    from dagster_pomo.engine.ingest import ingest_span

    program = compile_corpus(CORPUS, "c.pomo")

    def line(t: int) -> str:
        return f'{{"relation": "water_level", "t": {t}, "args": ["t1", 50.0]}}\n'

    old, new = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    old.write_text(line(10) + "not json\n" + line(30))
    new.write_text(line(100) + line(120))
    files = [old, new]

    everything = ingest_span(program, files, {}, None, 1000, ANY_TIME)
    assert everything.files_read == 2 and everything.lines_read == 5
    assert (everything.landed[str(old)].first, everything.landed[str(old)].last) == (10, 30)

    latest = ingest_span(program, files, everything.landed, 100, 200, ANY_TIME)
    assert latest.files_read == 1, "the old file holds nothing from time 100 on"
    assert [r.t for r in latest.events["water_level"]] == [100, 120]
    assert latest.lines_read == 5 and latest.files == everything.files
    assert [(Path(q.file).name, q.line) for q in latest.quarantined] == [("a.jsonl", 2)]
    assert ingest_span(program, files, everything.landed, 20, 50, ANY_TIME).files_read == 1
    assert ingest_span(program, files, everything.landed, None, 50, ANY_TIME).files_read == 1

    with open(old, "a", encoding="utf-8") as handle:  # a late event, in an old file
        handle.write(line(150))
    late = ingest_span(program, files, latest.landed, 100, 200, ANY_TIME)
    assert late.files_read == 2, "a file that changed is read again"
    assert sorted(r.t for r in late.events["water_level"]) == [10, 30, 100, 120, 150]
    assert late.landed[str(old)].last == 150 and late.lines_read == 6
    assert ingest_span(program, files, late.landed, 100, 200, ANY_TIME).files_read == 2


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=1),
)


@given(st.lists(st.tuples(SCALARS, st.sampled_from(["int", "float", "str", "bool"])), max_size=4))
def test_the_quick_typing_of_values_agrees_with_coerce(pairs: list[tuple[object, str]]) -> None:
    """Values already of their column's kind take a quick path; whatever it accepts must be
    exactly what ``coerce`` makes of it (a boolean is never an int, an int becomes a float
    in a float column), and whatever it declines ``coerce`` must decide."""
    args, types = tuple(v for v, _ in pairs), tuple(t for _, t in pairs)
    quick = _coerce_plain(args, types)
    if quick is None:
        return
    slow = tuple(coerce(v, t) for v, t in pairs)
    assert quick == slow
    assert [type(v) for v in quick] == [type(v) for v in slow]


# JSON values as a landing line may hold them: numbers of every size and spelling, text
# with quotes, colons and escapes, and nesting.
_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(alphabet=st.sampled_from('ab"\\: ,{}\t\u00e9\ud800 0e.-'), max_size=6),
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
_KEYS = st.sampled_from(["relation", "t", "args", "kt", ""])


@st.composite
def _json_lines(draw: st.DrawFn) -> bytes:
    """A line as a landing file may hold it: an object of event keys (and others), written
    with any spacing, floats in any notation, a key sometimes repeated, a byte sometimes
    changed."""
    if draw(st.integers(0, 3)):  # an event's shape: its keys once each, scalar values
        scalars = st.one_of(
            st.none(),
            st.booleans(),
            st.integers(-(2**62), 2**62),
            st.floats(allow_nan=False, allow_infinity=False),
            st.text(alphabet=st.sampled_from("ab :\u00e9-"), max_size=6),
        )
        args = st.lists(scalars, max_size=3) | st.dictionaries(st.text(max_size=3), scalars)
        event = {"relation": scalars, "t": scalars, "args": args}
        keys = draw(st.lists(st.sampled_from(list(event)), unique=True))
        pairs = [(k, draw(event[k])) for k in keys]
    else:
        pairs = draw(st.lists(st.tuples(_KEYS, _JSON), max_size=4))
    pairs += draw(st.lists(st.tuples(_KEYS, _JSON), max_size=1))  # a repeated key, maybe
    colon, comma = draw(st.sampled_from([(": ", ", "), (":", ","), (" : ", " , "), ("\t:", ",\r")]))

    def text(value: object) -> str:
        if isinstance(value, float) and draw(st.booleans()):
            return draw(st.sampled_from(["{:.17e}", "{:.3E}", "{!r}", "{:.25f}"])).format(value)
        if isinstance(value, dict):
            return "{" + comma.join(json.dumps(k) + colon + text(v) for k, v in value.items()) + "}"
        if isinstance(value, list):
            return "[" + comma.join(map(text, value)) + "]"
        return json.dumps(value)

    line = "{" + comma.join(json.dumps(k) + colon + text(v) for k, v in pairs) + "}"
    raw = line.encode("utf-8", errors="surrogatepass")
    if raw and draw(st.integers(0, 3)) == 0:
        at = draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1 :]
    return raw


@settings(max_examples=400)
@given(_json_lines())
def test_the_quick_reading_of_a_line_agrees_with_the_checking_one(raw: bytes) -> None:
    """A line the quick reader (orjson) takes is one the checking reader takes, as the same
    object: the same keys, values and their types (an int is not a float, -0.0 keeps its
    sign); a repeated key, a number too long or an integer past 64 bits it leaves to the
    checking reader, which says why."""
    quick = _quick(raw)
    if quick is None:
        return
    slow = decode(raw.decode("utf-8"))  # raises BadLine if the quick reader took a bad line
    assert repr(quick) == repr(slow)


def test_the_quick_reader_takes_the_common_line_and_leaves_the_rest() -> None:
    """What W5's landing holds goes the quick way; what only the checks can judge does not."""
    line = b'{"relation": "water_level", "t": 1699999200000, "args": {"tank": "n", "level": 36.05}}'
    assert _quick(line) == decode(line.decode())
    for left in [
        b'{"relation": "r", "t": 1, "t": 2, "args": []}',  # a repeated key
        b'{"relation": "r", "t" : 1, "t": 2, "args": []}',  # ... after white space
        b'{"relation": "r", "t": 18446744073709551616, "args": []}',  # past 64 bits
        b'{"relation": "r", "t": -9223372036854775809, "args": []}',  # orjson: a float
        b'{"relation": "r", "t": 1, "args": [1.00000000000000000000000000000000000000001]}',
        b'{"relation": "r", "t": 1, "args": ["\\ud800"]}',  # a lone surrogate
        b'{"relation": "r", "t": 1, "args": [NaN]}',
        b'{"relation": "r", "t": 1, "kt": 1}',
    ]:
        assert _quick(left) is None, left


_values = st.one_of(
    st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.text(max_size=5), st.booleans()
)
_rows = st.lists(
    st.builds(
        Version,
        st.integers(0, 10**13),
        st.tuples(_values, _values),
        st.integers(0, 10**13),
        st.integers(0, 2**63 - 1),
    ),
    max_size=30,
)


@given(_rows, st.randoms(use_true_random=False), st.data())
def test_a_partitions_data_version_is_its_events_in_any_order(
    rows: list[Version], rng, data: st.DataObject
) -> None:
    """What a stored input partition is versioned by (its Dagster data version): the same
    events in any order are the same version; one event more, or one fewer, is another."""
    shuffled = list(rows)
    rng.shuffle(shuffled)
    assert digest(shuffled) == digest(rows)
    extra = data.draw(_rows.filter(bool)).pop()
    assert digest([*rows, extra]) != digest(rows)
    if rows:
        assert digest(rows[1:]) != digest(rows)


def test_a_data_version_is_the_same_in_every_process() -> None:
    """Runs are processes of their own, each with its own seed for Python's `hash`."""
    rows = [Version(5, ("north", 1.5), 5, 9), Version(7, ("south", True), 7, 2**63 - 1)]
    code = (
        "from dagster_pomo.engine.versions import Version, digest\n"
        f"print(digest([Version(7, ('south', True), 7, {2**63 - 1}),"
        " Version(5, ('north', 1.5), 5, 9)]))"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert seen == {digest(rows)}


def test_parquet_landing_rows_are_events_as_json_lines_are(tmp_path: Path) -> None:
    """A Parquet landing file, as Spark or pandas writes one: a `relation` column, `t` (ms
    or a timestamp) and a column per argument (null where a row's relation has no such
    column). Its rows are the events the same JSON lines are, typed alike; a bad row is
    quarantined with its file, row number and reason; a file that is not Parquet is one
    bad row; a landing folder lists both kinds."""
    import json
    from datetime import UTC, datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    from dagster_pomo.engine.ingest import landing_files

    program = compile_corpus(CORPUS, "tanks.pomo")
    rows = [  # (relation, t, tank, level, since), then the reason a bad row has
        ("water_level", 1000, "t1", 95.5, None),
        ("water_level", datetime(2024, 1, 1, 0, 0, 1, tzinfo=UTC), "t2", 91.0, None),
        ("maintenance", 5, "t1", None, datetime(1970, 1, 1, 0, 0, 0, 4000, tzinfo=UTC)),
        ("water_level", 3, "t1", None, None),
        ("pressure", 3, "t1", 1.0, None),
        (None, 3, "t1", 1.0, None),
        ("water_level", None, "t1", 1.0, None),
        ("water_level", 3, "t1", float("nan"), None),
        ("maintenance", 3, "t1", 2.0, 4),
    ]
    reasons = [
        "missing `level`",
        "unknown relation `pressure`",
        'missing "relation"',
        'missing time "t"',
        "not finite",
        "unknown `level`",
    ]
    table = pa.table(
        {
            "relation": [r[0] for r in rows],
            "t": [
                r[1] if not isinstance(r[1], datetime) else int(r[1].timestamp() * 1000)
                for r in rows
            ],
            "tank": [r[2] for r in rows],
            "level": [r[3] for r in rows],
            "since": pa.array(
                [None if r[4] is None else r[4] if isinstance(r[4], int) else 4 for r in rows],
                pa.int64(),
            ),
        }
    )
    # The second row's time as a timestamp column would hold it: one file with `t` in ms,
    # one with `t` as a timestamp.
    landing = tmp_path / "landing"
    landing.mkdir()
    pq.write_table(table, landing / "a.parquet")
    stamps = table.set_column(
        1, "t", pa.array([datetime(2024, 1, 1, 0, 0, 1)] * 9, pa.timestamp("ms"))
    )
    pq.write_table(stamps.slice(1, 1), landing / "b.parquet")
    (landing / "c.parquet").write_text("not parquet\n")
    lines = GOOD[:3]
    (landing / "d.jsonl").write_text("\n".join(lines) + "\n")
    assert [p.name for p in landing_files(landing)] == [
        "a.parquet",
        "b.parquet",
        "c.parquet",
        "d.jsonl",
    ]

    ingested = ingest_files(program, landing_files(landing), ANY_TIME)
    assert ingested.lines_read == len(rows) + 1 + 1 + len(lines)
    assert ingested.accepted + len(ingested.quarantined) == ingested.lines_read
    from_json = ingest_files(program, [landing / "d.jsonl"], ANY_TIME).events
    # a.parquet's three good rows are the three JSON lines' events; b.parquet's one row is
    # the second of them again, its time from a timestamp column: each event is kept once.
    water = from_json["water_level"]
    assert sorted(ingested.events["water_level"]) == sorted(water)
    assert ingested.events["maintenance"] == from_json["maintenance"]
    assert ingested.repeats == len(water) + 1 + len(from_json["maintenance"])
    bad = [(q.file, q.line, q.reason) for q in ingested.quarantined]
    a = [(f, n, r) for f, n, r in bad if f.endswith("a.parquet")]
    assert [n for _, n, _ in a] == list(range(4, 10))
    for (_, _, reason), want in zip(a, reasons, strict=True):
        assert want in reason, (reason, want)
    (c,) = [(f, n, r) for f, n, r in bad if f.endswith("c.parquet")]
    assert c[1] == 1 and "not a Parquet file" in c[2]
    shown = [q.text for q in ingested.quarantined if q.file.endswith("a.parquet")][0]
    assert json.loads(shown)["relation"] == "water_level"


@dataclass(frozen=True)
class Bad:
    words: str  # what the quarantine reason says


def _arrow_types() -> list[tuple[str, Any, list[Any], list[Any]]]:
    """Arrow types a Parquet argument column may have: a name, the type, two values, and
    what each becomes (an accepted value, or `Bad`: the quarantine reason's words)."""
    import datetime as dt
    from decimal import Decimal

    import pyarrow as pa

    bad_utf8 = b"caf\xe9"
    return [
        ("int8", pa.int8(), [1, -2], [1, -2]),
        ("uint64", pa.uint64(), [3, 2**64 - 1], [3, Bad("does not fit a 64-bit integer")]),
        ("float16", pa.float16(), [1.5, 2.0], [1.5, 2.0]),
        ("float32", pa.float32(), [0.5, float("nan")], [0.5, Bad("is not finite")]),
        ("decimal128", pa.decimal128(10, 2), [Decimal("12.50"), Decimal("3.00")], [12.5, 3.0]),
        (
            "decimal scale 0",
            pa.decimal128(24, 0),
            [Decimal("7"), Decimal(2**70)],
            [7, Bad("does not fit a 64-bit integer")],
        ),
        ("decimal256", pa.decimal256(40, 3), [Decimal("1.250"), Decimal("0")], [1.25, 0.0]),
        ("bool", pa.bool_(), [True, False], [True, False]),
        ("string", pa.string(), ["a", "é"], ["a", "é"]),
        ("large_string", pa.large_string(), ["b", ""], ["b", ""]),
        ("binary", pa.binary(), [b"tank", bad_utf8], ["tank", Bad("is not UTF-8 text")]),
        ("large_binary", pa.large_binary(), [b"x", b"\xff"], ["x", Bad("is not UTF-8 text")]),
        ("fixed binary", pa.binary(2), [b"ok", b"\xc3("], ["ok", Bad("is not UTF-8 text")]),
        ("dictionary", pa.dictionary(pa.int32(), pa.string()), ["d", "e"], ["d", "e"]),
        ("date32", pa.date32(), [dt.date(2024, 1, 1)] * 2, [Bad("holds a date")] * 2),
        ("time64", pa.time64("us"), [dt.time(1, 2)] * 2, [Bad("holds a time")] * 2),
        ("duration", pa.duration("ms"), [dt.timedelta(1)] * 2, [Bad("holds a timedelta")] * 2),
        (
            "list",
            pa.list_(pa.int64()),
            [[1], [2, 3]],
            [Bad("must be a number, string or boolean")] * 2,
        ),
        ("null", pa.null(), [None, None], [Bad("missing `c0`")] * 2),
    ]


@pytest.mark.parametrize("case", _arrow_types(), ids=lambda c: c[0])
def test_every_arrow_type_of_a_parquet_landing_is_read_or_quarantined(
    tmp_path: Path, case: tuple[str, Any, list[Any], list[Any]]
) -> None:
    """A Parquet argument column of any Arrow type: its values read as the rules say
    (decimals as numbers, binary data as text when it is UTF-8) or their rows quarantined
    with a reason; never an error of the run."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    _, kind, values, expected = case
    program = compile_corpus("seen(v) := m(v);\n", "types.pomo")
    table = pa.table(
        {
            "relation": pa.array(["m", "m"]),
            "t": pa.array([1, 2], pa.int64()),
            "c0": pa.array(values, kind),
        }
    )
    pq.write_table(table, tmp_path / "typed.parquet")
    got = ingest_files(program, [tmp_path / "typed.parquet"], ANY_TIME)
    accepted = {r.t: r.args[0] for r in got.events.get("m", [])}
    reasons = {q.line: q.reason for q in got.quarantined}
    assert len(accepted) + len(reasons) == got.lines_read == 2
    for t, want in zip((1, 2), expected, strict=True):
        if isinstance(want, Bad):
            assert t in reasons and want.words in reasons[t], (reasons, accepted)
        else:
            assert t in accepted and accepted[t] == want and type(accepted[t]) is type(want)


def test_a_string_column_with_bytes_that_are_not_utf8_quarantines_those_rows(
    tmp_path: Path,
) -> None:
    """Arrow lets bytes that are not UTF-8 into a string column (written as binary, read as
    string): each such row is quarantined, the others read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw = pa.array([b"north", b"sou\xffth", b"east"], pa.binary())
    table = pa.table(
        {"relation": ["m"] * 3, "t": pa.array([1, 2, 3], pa.int64()), "c0": raw.view(pa.string())}
    )
    pq.write_table(table, tmp_path / "bad.parquet")
    program = compile_corpus("seen(v) := m(v);\n", "types.pomo")
    got = ingest_files(program, [tmp_path / "bad.parquet"], ANY_TIME)
    assert sorted(r.args[0] for r in got.events["m"]) == ["east", "north"]
    assert [(q.line, "not UTF-8" in q.reason) for q in got.quarantined] == [(2, True)]


@pytest.mark.parametrize(
    "columns",
    [["relation", "t", "args", "c0"], ["relation", "t", "c0", "c0"]],
    ids=["args-and-columns", "repeated-name"],
)
def test_a_parquet_file_whose_columns_are_ambiguous_is_quarantined_whole(
    tmp_path: Path, columns: list[str]
) -> None:
    """An ``args`` column beside argument columns, or two columns of one name: no row says
    which value is meant, so every row is quarantined with the reason."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrays = {
        "relation": pa.array(["m", "m"]),
        "t": pa.array([1, 2], pa.int64()),
        "args": pa.array([[1], [2]], pa.list_(pa.int64())),
        "c0": pa.array([1, 2], pa.int64()),
    }
    table = pa.Table.from_arrays([arrays[c] for c in columns], names=columns)
    pq.write_table(table, tmp_path / "odd.parquet")
    program = compile_corpus("seen(v) := m(v);\n", "types.pomo")
    got = ingest_files(program, [tmp_path / "odd.parquet"], ANY_TIME)
    assert not got.events.get("m")
    word = "`args` column" if "args" in columns else "two columns named `c0`"
    assert [q.line for q in got.quarantined] == [1, 2]
    assert all(word in q.reason for q in got.quarantined), got.quarantined
