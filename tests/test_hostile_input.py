"""Hostile landing files: every bad line is quarantined with its reason, the counts balance,
the lines around it keep their numbers, and nothing raises, neither in the inputs step nor
in the landing sensor's tick."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dagster_pomo.engine.ingest import ingest_files
from dagster_pomo.engine.lines import DEFAULT_TIMES, parse_window
from dagster_pomo.lang import compile_corpus

CORPUS = """.decl level(tank: str, value: float) lifetime 10m;
.decl count(tank: str, n: int);
.decl flag(on: bool);
.decl since(tank: str, at: time);
high(tank, v) := level(tank, v) if v > 90.0;
many(tank) := count(tank, n) ^ flag(true) if n > 3;
seen(tank) := since(tank, _);
free(x) := loose(x, _);
"""
T = 1_700_000_000_000  # inside the default accepted times


_NORTH = ["north", 50.0]


def _event(relation: object = "level", t: object = T, args: object = _NORTH, **extra) -> str:
    obj = {"relation": relation, "t": t, "args": args}
    obj.update(extra)
    return json.dumps(obj)


GOOD = [
    _event(),
    _event(args={"tank": "south", "value": 95}),
    _event("count", T + 1, ["north", 7]),
    _event("flag", "2023-11-14T22:13:20Z", [True]),
    _event("since", T, ["north", "2023-11-14T22:00:00+01:00"]),
    _event("loose", T, [1, "x"]),
    _event("level", T, ["é ü 水", -0.0]),  # any Unicode text, negative zero
    _event("count", T, ["n", 2**63 - 1]),  # the largest int64
    _event("level", T, ["n", 1.7976931348623157e308]),  # the largest finite float
]

# Each bad line, and a fragment its quarantine reason must hold.
BAD: dict[str, str] = {
    # not JSON, or not an object
    "not json at all": "invalid JSON",
    "{": "invalid JSON",
    "}": "invalid JSON",
    '{"relation": "level", "t": 1,}': "invalid JSON",
    "{'relation': 'level'}": "invalid JSON",
    '{relation: "level"}': "invalid JSON",
    '{"relation": "level" "t": 1}': "invalid JSON",
    '{"relation": "level", "t": 1} // a comment': "invalid JSON",
    '{"relation": "level", "t": 1}{"relation": "level", "t": 2}': "invalid JSON",
    '{"relation": "le\tvel", "t": 1}': "invalid JSON",  # a raw tab inside a string
    '{"relation": "level", "t": 0x10}': "invalid JSON",
    '{"relation": "level", "t": 01}': "invalid JSON",
    '{"relation": "level", "t": +1}': "invalid JSON",
    '{"relation": "level", "t": .5}': "invalid JSON",
    '{"relation": "level", "t": 1.}': "invalid JSON",
    '{"relation": "lev\\x41l"}': "invalid JSON",
    '{"relation": "level", "t": 1, "args": ["a", 1.0]': "invalid JSON",
    '"just a string"': "must be a JSON object",
    "42": "must be a JSON object",
    "null": "must be a JSON object",
    "true": "must be a JSON object",
    '[{"relation": "level"}]': "must be a JSON object",
    # the relation
    '{"t": 1, "args": []}': 'missing "relation"',
    _event(relation=None): 'missing "relation"',
    _event(relation=7): 'missing "relation"',
    _event(relation=["level"]): 'missing "relation"',
    _event(relation=""): "unknown relation ``",
    _event(relation="pressure"): "unknown relation `pressure`",
    _event(relation="levle"): "did you mean `level`?",
    _event(relation="clock"): "unknown relation `clock`",
    _event(relation="high"): "`high` is derived by rules",
    _event(relation="x" * 10_000): "unknown relation `xxxxxxxxxx",
    _event(relation="\ud800"): "unknown relation",
    _event(relation="Level"): "unknown relation `Level`",
    # the time
    json.dumps({"relation": "level", "args": ["n", 1.0]}): 'missing time "t"',
    _event(t=None): 'missing time "t"',
    _event(t=True): "a boolean is not a time",
    _event(t=1.5): "invalid time",
    _event(t="yesterday"): "invalid time",
    _event(t=""): "invalid time",
    _event(t=[T]): "invalid time",
    _event(t={"ms": T}): "invalid time",
    _event(t="2023-13-01T00:00:00Z"): "invalid time",
    _event(t=T // 1000): "in seconds?",
    _event(t=-5): "outside the accepted times",
    _event(t=0): "outside the accepted times",
    _event(t="0001-01-01T00:00:00Z"): "outside the accepted times",
    _event(t="9999-12-31T23:59:59Z"): "outside the accepted times",
    _event(t=2**63): "outside the accepted times",
    _event(t=-(2**63)): "outside the accepted times",
    _event(t=1e300): "outside the accepted times",
    _event(t=T * 1000): "outside the accepted times",  # microseconds
    '{"relation": "level", "t": ' + "9" * 5000 + ', "args": ["n", 1.0]}': "digits: too large",
    '{"relation": "level", "t": "' + "9" * 5000 + '", "args": ["n", 1.0]}': "invalid time",
    _event(t=f"{T}.5"): "invalid time",
    # the arguments' shape
    _event(args=["north"]): "takes 2 arguments, this has 1",
    _event(args=["north", 1.0, 2.0]): "takes 2 arguments, this has 3",
    _event(args=[]): "takes 2 arguments, this has 0",
    _event(args={"tank": "n"}): "missing `value`",
    _event(args={"tank": "n", "value": 1.0, "depth": 3}): "unknown `depth`",
    _event(args={}): "missing `tank`, `value`",
    _event(args="north"): '"args" must be an object or a list',
    _event(args=7): '"args" must be an object or a list',
    _event(args=None): '"args" must be an object or a list',
    _event(args=True): '"args" must be an object or a list',
    # the values
    _event(args=["n", None]): "must be a number, string or boolean",
    _event(args=["n", [1.0]]): "must be a number, string or boolean",
    _event(args=["n", {"v": 1.0}]): "must be a number, string or boolean",
    _event(args=["n", "high"]): 'is float: got "high", a string',
    _event(args=["n", True]): "is float: got true",
    _event(args=[7, 1.0]): "is str: got 7, an integer",
    _event(args=[False, 1.0]): "is str: got false",
    _event(args=["\ud800", 1.0]): "lone surrogate",
    _event(args=["ok\udfff", 1.0]): "lone surrogate",
    _event("count", T, ["n", 1.5]): "is int: got 1.5",
    _event("count", T, ["n", "7"]): 'is int: got "7"',
    _event("count", T, ["n", 2**63]): "does not fit a 64-bit integer",
    _event("count", T, ["n", -(2**63) - 1]): "does not fit a 64-bit integer",
    _event("count", T, ["n", True]): "is int: got true",
    _event("flag", T, [1]): "is bool: got 1",
    _event("flag", T, ["true"]): 'is bool: got "true"',
    _event("since", T, ["n", "soon"]): "is time",
    _event("since", T, ["n", True]): "is time",
    _event("since", T, ["n", 2**64]): "does not fit a 64-bit integer",
    _event("loose", T, ["one", "x"]): "(inferred from the data)",
    '{"relation": "level", "t": 1700000000000, "args": ["n", NaN]}': "NaN is not a JSON number",
    '{"relation": "level", "t": 1700000000000, "args": ["n", Infinity]}': "Infinity is not a",
    '{"relation": "level", "t": 1700000000000, "args": ["n", -Infinity]}': "-Infinity is not a",
    '{"relation": "level", "t": 1700000000000, "args": ["n", 1e400]}': "too large for a 64-bit",
    '{"relation": "level", "t": 1700000000000, "args": ["n", -1e400]}': "too large for a 64-bit",
    '{"relation": "level", "t": 1700000000000, "args": ["n", 1' + "0" * 400 + "]}": "digits",
    '{"relation": "level", "t": 1700000000000, "args": ["n", 1' + "0" * 100_000 + "]}": "digits",
    '{"relation": "level", "t": 1700000000000, "args": ' + "[" * 100_000 + "]" * 100_000 + "}": (
        "nested too deeply"
    ),
    '{"relation": "level", "t": 1700000000000, "args": ' + "[" * 600 + "]" * 600 + "}": (
        "takes 2 arguments"
    ),
    # keys
    '{"relation": "level", "relation": "count", "t": 1700000000000, "args": ["n", 1]}': (
        "key `relation` appears twice"
    ),
    '{"relation": "level", "t": 1, "t": 1700000000000, "args": ["n", 1.0]}': (
        "key `t` appears twice"
    ),
    '{"relation": "level", "t": 1700000000000, "args": {"tank": "a", "tank": "b", "value": 1}}': (
        "key `tank` appears twice"
    ),
    _event(kt=T): "unknown key `kt`",
    _event(exp=None): "unknown key `exp`",
    _event(Relation="level"): "unknown key `Relation`",
}


def _landing(tmp_path: Path) -> tuple[Path, list[str]]:
    """A file alternating good and bad lines, with blank lines, a BOM before the first line,
    CRLF endings on some, a line with a bare CR inside and one that is not UTF-8."""
    lines = [GOOD[0]]
    for i, bad in enumerate(BAD):
        lines.append(bad)
        lines.append(GOOD[(i + 1) % len(GOOD)])
        if i % 10 == 0:
            lines.append("   ")
    raw = "\n".join(lines).encode("utf-8", errors="surrogatepass")
    raw = b"\xef\xbb\xbf" + raw.replace(b"\n", b"\r\n", 20)
    raw += b"\n" + (GOOD[0] + "\r" + GOOD[1]).encode() + b"\n"  # one bad line, not two
    raw += b'{"relation": "level", "t": 1700000000000, "args": ["\xff\xfe", 1.0]}\n'
    raw += GOOD[2].encode() + b"\n"
    path = tmp_path / "hostile.jsonl"
    path.write_bytes(raw)
    return path, lines


def test_every_kind_of_bad_line_is_quarantined_with_its_reason(tmp_path: Path) -> None:
    assert len(BAD) >= 80
    program = compile_corpus(CORPUS, "hostile.pomo")
    path, lines = _landing(tmp_path)
    ingested = ingest_files(program, [path], DEFAULT_TIMES)

    nonblank = [line for line in lines if line.strip()]
    assert ingested.lines_read == len(nonblank) + 3
    assert ingested.accepted + len(ingested.quarantined) == ingested.lines_read
    good_lines = len(nonblank) - len(BAD) + 1
    assert ingested.accepted == good_lines, "every good line is accepted, the BOM's too"

    numbered = {q.line: q for q in ingested.quarantined}
    physical = path.read_bytes().split(b"\n")
    for number, q in numbered.items():
        if q.reason.startswith("not UTF-8"):
            assert number == len(physical) - 2 and "\\xff\\xfe" in q.text
            continue
        text = physical[number - 1].removesuffix(b"\r").decode("utf-8", errors="surrogatepass")
        if "\r" in text:
            assert "invalid JSON" in q.reason and number == len(physical) - 3
            continue
        assert text in BAD, (number, q.reason)
        assert BAD[text] in q.reason, (text[:80], q.reason)
        json.dumps(q.to_json()).encode("utf-8")  # storable as it is
        q.reason.encode("utf-8")  # printable as it is
    assert len(numbered) == len(BAD) + 2, "each bad line is quarantined once, under its number"


def test_a_window_of_accepted_times_is_parsed_and_checked() -> None:
    window = parse_window("2020-01-01..2021-01-01")
    window.check(window.earliest)
    with pytest.raises(ValueError, match="outside the accepted times"):
        window.check(window.latest)
    assert parse_window("..2021-01-01").earliest < 0
    assert parse_window("any").latest == 2**62
    for bad in ("2021-01-01..2020-01-01", "soon", "2020-01-01", "..-9" + "9" * 30):
        with pytest.raises(ValueError):
            parse_window(bad)


def _pomo(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dagster_pomo.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def _run(corpus: Path, events: Path, *more: str) -> subprocess.CompletedProcess[str]:
    """``pomo run CORPUS --events EVENTS --engine reference MORE`` in the corpus's folder."""
    args = ("run", str(corpus), "--events", str(events), "--engine", "reference", *more)
    return _pomo(*args, cwd=corpus.parent)


@pytest.mark.parametrize(
    "outlier",
    [T // 1000, -1, "0001-01-01T00:00:00Z", 2**63, 1e300, "9999-12-31T23:59:59Z"],
    ids=["seconds", "negative", "year-1", "2^63", "1e300", "year-9999"],
)
def test_an_outlier_time_is_quarantined_and_the_run_covers_the_rest(
    tmp_path: Path, outlier: object
) -> None:
    """One bad timestamp no longer stretches the run over hundreds of thousands of epochs."""
    corpus = tmp_path / "c.pomo"
    corpus.write_text(CORPUS)
    events = tmp_path / "e.jsonl"
    events.write_text(f"{GOOD[0]}\n{_event(t=outlier)}\n{GOOD[1]}\n")
    done = _run(corpus, events, "--out", "o")
    assert done.returncode == 0, done.stderr
    assert "1 epoch of 1h" in done.stderr and "2 accepted, 1 quarantined" in done.stderr
    (q,) = [json.loads(x) for x in (tmp_path / "o" / "_quarantine.jsonl").read_text().splitlines()]
    assert q["line"] == 2 and "outside the accepted times" in q["reason"]
    with_any = _run(corpus, events, "--times", "2023-01-01..2024-01-01")
    assert with_any.returncode == 0 and "1 quarantined" in with_any.stderr


def test_an_internal_error_exits_3_with_one_line_and_the_traceback_in_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bug (here: the corpus loader failing unexpectedly) is not a corpus error: exit 3,
    one line on stderr, the traceback in the file it names."""
    from dagster_pomo.cli import main as cli

    def broken(path: Path) -> None:
        raise RuntimeError("something the code did not expect")

    corpus = tmp_path / "c.pomo"
    corpus.write_text(CORPUS)
    monkeypatch.setattr(cli, "load_program", broken)
    monkeypatch.delenv("POMO_TRACEBACK", raising=False)
    assert cli.main(["check", str(corpus)]) == 3
    err = capsys.readouterr().err
    (line,) = err.strip().splitlines()
    assert line.startswith("pomo: internal error in `pomo check` (RuntimeError: something")
    assert "this is a bug" in line and "Traceback" not in err
    trace = Path(line.rsplit(" ", 1)[-1])
    assert trace.is_file() and "Traceback" in trace.read_text()
    trace.unlink()


def test_out_must_be_a_folder(tmp_path: Path) -> None:
    corpus = tmp_path / "c.pomo"
    corpus.write_text(CORPUS)
    events = tmp_path / "e.jsonl"
    events.write_text(GOOD[0] + "\n")
    (tmp_path / "out").write_text("a file")
    done = _run(corpus, events, "--out", "out")
    assert done.returncode == 2 and "--out out is a file" in done.stderr


def test_a_sensor_tick_over_a_hostile_file_moves_its_cursor(tmp_path: Path) -> None:
    """Whatever a landing file holds, the tick requests the epochs of its readable events
    and records the file as seen: no later file is held up behind it."""
    from dagster import DagsterInstance, HourlyPartitionsDefinition

    from dagster_pomo.examples import DEFAULT_START, outbox_handlers
    from dagster_pomo.orchestration import PomoStorage, pomo_definitions
    from tests.conftest import RULES
    from tests.sensor_ticks import sensor_tick

    landing, warehouse = tmp_path / "landing", tmp_path / "warehouse"
    landing.mkdir()
    partitions = HourlyPartitionsDefinition(start_date="2023-11-14-22:00")
    corpus = RULES / "water_tanks.pomo"
    handlers = outbox_handlers(corpus, tmp_path / "outbox.sqlite")
    defs = pomo_definitions(corpus, partitions, str(warehouse), str(landing), handlers=handlers)
    hostile, _ = _landing(tmp_path)
    good = json.dumps(
        {"relation": "water_level", "t": DEFAULT_START + 60_000, "args": ["north", 5.0]}
    )
    (landing / "a.jsonl").write_bytes(hostile.read_bytes() + good.encode() + b"\n")
    storage = PomoStorage(warehouse=str(warehouse), landing=str(landing))
    with DagsterInstance.ephemeral() as instance:

        def tick(cursor: str | None):
            return sensor_tick(defs, instance, storage, cursor)

        first = tick(None)
        (request,) = first.run_requests
        assert request.tags["dagster/asset_partition_range_start"] == "2023-11-14-22:00"
        assert request.tags["dagster/asset_partition_range_end"] == "2023-11-14-22:00"
        assert "a.jsonl" in json.loads(first.cursor)
        assert tick(first.cursor).run_requests == []


def test_pomo_run_says_when_next_skips_from_early_facts_to_the_first_epoch(
    tmp_path: Path,
) -> None:
    corpus = tmp_path / "streaks.pomo"
    corpus.write_text(
        '.decl streak(u: str, n: int);\nstreak("a", 0);\n'
        "streak(u, n + 1) @next := streak(u, n) ^ login(u);\n"
    )
    events = tmp_path / "e.jsonl"
    events.write_text(json.dumps({"relation": "login", "t": T, "args": ["a"]}) + "\n")
    done = _run(corpus, events)
    assert done.returncode == 0
    assert "facts from 1970-01-01T00:00:00Z lie before the first epoch" in done.stderr
    assert "pass --start to begin earlier" in done.stderr
    flat = tmp_path / "flat.pomo"
    flat.write_text('.decl streak(u: str, n: int);\nstreak("a", 0);\nseen(u) := login(u);\n')
    quiet = _run(flat, events)
    assert quiet.returncode == 0 and "lie before the first epoch" not in quiet.stderr
