"""`pomo run` as a user calls it: options, output files, quarantine, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dagster_pomo.plan.schema import Schema
from tests.compare import window_versions
from tests.conftest import ROOT

POMO = Path(sys.executable).with_name("pomo")
CORPUS = """.decl r(k: str, x: float) lifetime 100;
avg(k) @average(x) := r(k, x);
"""


def pomo(*args: str) -> subprocess.CompletedProcess[str]:
    """``pomo ARGS``; a run accepts any time (these files count milliseconds from 0), unless
    the test says which times with ``--times``."""
    if args[:1] == ("run",) and "--times" not in args:
        args = (*args, "--times", "any")
    return subprocess.run([str(POMO), *args], capture_output=True, text=True, cwd=ROOT, check=False)


def setup(tmp_path: Path) -> tuple[Path, Path]:
    corpus = tmp_path / "avg.pomo"
    corpus.write_text(CORPUS)
    events = tmp_path / "events"
    events.mkdir()
    (events / "1.jsonl").write_text(
        '{"relation": "r", "t": 10, "args": ["a", 10.0]}\n'
        '{"relation": "r", "t": 50, "args": ["a", 20.0]}\n'
    )
    (events / "2.jsonl").write_text('{"relation": "r", "t": 60, "args": ["a"]}\nnope\n')
    return corpus, events


Ran = tuple[Path, subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def on_spark_plans(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    """One `pomo run` of `setup`'s files on Spark's plans (``--in-process-inputs 0`` on
    ``local[1]``, its outputs in ``plans``), shared by the tests that read what it wrote
    and said: a fresh process that starts a JVM costs a test 10-15 s of a core. Its
    folder and the finished process."""
    tmp = tmp_path_factory.mktemp("plans")
    corpus, events = setup(tmp)
    return tmp, pomo(
        *("run", str(corpus), "--events", str(events), "--out", str(tmp / "plans")),
        *("--master", "local[1]", "--in-process-inputs", "0"),
    )


def test_out_files_follow_the_documented_format(tmp_path: Path) -> None:
    corpus, events = setup(tmp_path)
    out = tmp_path / "out"
    result = pomo(
        "run",
        str(corpus),
        "--events",
        str(events),
        "--epoch",
        "25ms",
        "--engine",
        "reference",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    lines = (out / "avg.jsonl").read_text().splitlines()
    assert lines == [
        '{"args": ["a"], "t": 10, "exp": 110, "aggregates": {"average(x)": 10.0}}',
        '{"args": ["a"], "t": 50, "exp": 110, "aggregates": {"average(x)": 15.0}}',
    ]
    quarantine = [json.loads(x) for x in (out / "_quarantine.jsonl").read_text().splitlines()]
    assert [(Path(q["file"]).name, q["line"]) for q in quarantine] == [
        ("2.jsonl", 1),
        ("2.jsonl", 2),
    ]
    assert "4 lines read, 2 accepted, 2 quarantined" in result.stderr


def test_the_default_engine_takes_spark_options_and_agrees(
    tmp_path: Path, on_spark_plans: Ran
) -> None:
    """`auto`, the default: a small epoch in this process; `--engine spark` and
    `--in-process-inputs 0` on Spark's plans; the same files every way."""
    corpus, events = setup(tmp_path)
    spark = pomo(
        *("run", str(corpus), "--events", str(events), "--out", str(tmp_path / "spark")),
        *("--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=1"),
    )
    assert spark.returncode == 0, spark.stderr
    assert "spark: local[1] (spark.sql.shuffle.partitions=1)" in spark.stderr
    reference = pomo(
        *("run", str(corpus), "--events", str(events), "--out", str(tmp_path / "reference")),
        *("--engine", "reference"),
    )
    assert reference.returncode == 0, reference.stderr
    assert (tmp_path / "spark" / "avg.jsonl").read_text() == (
        tmp_path / "reference" / "avg.jsonl"
    ).read_text()
    assert pomo("run", str(corpus), "--events", str(events), "--conf", "nonsense").returncode == 2
    # A small epoch is worked out in this process unless told never; the same files either way.
    assert "evaluated in 1 pass, in this process" in spark.stderr
    planned, plans = on_spark_plans  # the same files, `--in-process-inputs 0`
    assert plans.returncode == 0, plans.stderr
    assert "evaluated in 1 pass, on Spark's plans" in plans.stderr
    assert (planned / "plans" / "avg.jsonl").read_text() == (
        tmp_path / "spark" / "avg.jsonl"
    ).read_text()
    forced = pomo(
        *("run", str(corpus), "--events", str(events), "--out", str(tmp_path / "forced")),
        *("--master", "local[1]", "--engine", "spark"),
    )
    assert forced.returncode == 0, forced.stderr
    assert "evaluated in 1 pass, on Spark's plans" in forced.stderr
    assert (tmp_path / "forced" / "avg.jsonl").read_bytes() == (
        tmp_path / "spark" / "avg.jsonl"
    ).read_bytes()
    negative = pomo("run", str(corpus), "--events", str(events), "--in-process-inputs", "-1")
    assert negative.returncode == 2 and "-1 is below 0" in negative.stderr


def test_the_spark_flags_reach_the_session(tmp_path: Path) -> None:
    """``--master``, ``--remote`` and ``--conf`` are used, not only printed: a master or a
    Connect server that nobody listens on fails the run at once with exit 1, naming it
    (were it ignored, the run would go on on local Spark and succeed), and a configuration
    the JVM cannot start with fails it too."""
    corpus, events = setup(tmp_path)
    run = ("run", str(corpus), "--events", str(events))
    for flag, url, named in (
        ("--master", "spark://127.0.0.1:9", "spark://127.0.0.1:9 cannot be reached"),
        ("--remote", "sc://127.0.0.1:9", "Spark Connect server sc://127.0.0.1:9 cannot be"),
    ):
        result = pomo(*run, flag, url)
        assert result.returncode == 1, result.stderr
        assert named in result.stderr and "Connection refused" in result.stderr
        assert "internal error" not in result.stderr
    env = {**os.environ, "POMO_SPARK_MASTER": "spark://127.0.0.1:9"}
    from_env = subprocess.run(
        [str(POMO), *run, "--times", "any"], capture_output=True, text=True, env=env, check=False
    )
    assert from_env.returncode == 1 and "127.0.0.1:9 cannot be reached" in from_env.stderr
    tiny = pomo(*run, "--in-process-inputs", "0", "--conf", "spark.driver.memory=1m")
    assert tiny.returncode == 1, tiny.stderr
    assert "Spark did not start on local[*]" in tiny.stderr


def test_spark_s_own_logging_is_quiet_unless_verbose(tmp_path: Path, on_spark_plans: Ran) -> None:
    """A run that starts local Spark prints no Spark or JVM log lines of its own (the log4j
    profile, warnings about the host name or native libraries); ``--verbose`` shows them."""
    corpus, events = setup(tmp_path)
    run = ("run", str(corpus), "--events", str(events), "--in-process-inputs", "0")
    quiet, verbose = on_spark_plans[1], pomo(*run, "--verbose")
    assert quiet.returncode == verbose.returncode == 0, quiet.stderr + verbose.stderr
    assert "on Spark's plans" in quiet.stderr
    for said in ("log4j", " WARN ", "Setting default log level"):
        assert said not in quiet.stderr, quiet.stderr
    assert "log4j" in verbose.stderr and " WARN " in verbose.stderr


def test_what_a_landing_holds_cannot_write_to_the_terminal_or_through_links(
    tmp_path: Path,
) -> None:
    """A landing file's name and values reach stderr escaped (no terminal sequence, no line
    of their own) and cut when long, saying how much; a link in the landing folder to a
    file outside it is skipped with a warning (its lines never reach the quarantine);
    ``--out`` replaces a link where an output goes rather than writing through it."""
    corpus = tmp_path / "c.pomo"
    corpus.write_text(".decl r(k: str);\ns(k) := r(k);\n")
    land = tmp_path / "land"
    land.mkdir()
    evil = "\x1b[31mred\nfake.jsonl:9: accepted"
    lines = [
        json.dumps({"relation": evil, "t": 1, "args": ["a"]}),
        json.dumps({"relation": "r", "t": "x" * 10_000, "args": ["a"]}),
        json.dumps({"relation": "r", "t": 2, "args": ["a"]}),
    ]
    (land / "e\x1b[2Jvil.jsonl").write_text("\n".join(lines) + "\n")
    secret = tmp_path / "secret.jsonl"
    secret.write_text("top secret\n")
    (land / "secret.jsonl").symlink_to(secret)
    out = tmp_path / "out"
    out.mkdir()
    target = tmp_path / "target.txt"
    target.write_text("keep\n")
    (out / "s.jsonl").symlink_to(target)
    result = pomo("run", str(corpus), "--events", str(land), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stderr and "e\\x1b[2Jvil.jsonl:1: quarantined" in result.stderr
    assert "`\\x1b[31mred\\x0afake.jsonl:9: accepted`" in result.stderr
    assert "... (9,7" in result.stderr and "x" * 1_000 not in result.stderr
    assert "secret.jsonl: skipped: a link to a file outside the landing folder" in result.stderr
    assert "3 lines read, 1 accepted, 2 quarantined" in result.stderr
    assert "top secret" not in (out / "_quarantine.jsonl").read_text()
    assert target.read_text() == "keep\n" and not (out / "s.jsonl").is_symlink()
    assert json.loads((out / "s.jsonl").read_text())["args"] == ["a"]


def _on_a_terminal(*args: str) -> tuple[int, str]:
    """``pomo ARGS`` with its stdout and stderr a pseudo-terminal, as a user's shell has them:
    the exit code and everything it wrote there."""
    import pty

    ours, theirs = pty.openpty()
    process = subprocess.Popen(
        [str(POMO), *args], stdout=theirs, stderr=theirs, stdin=subprocess.DEVNULL, cwd=ROOT
    )
    os.close(theirs)
    said = b""
    while True:
        try:
            chunk = os.read(ours, 65536)
        except OSError:  # the other side closed
            break
        if not chunk:
            break
        said += chunk
    os.close(ours)
    return process.wait(timeout=300), said.decode("utf-8", errors="replace")


def test_a_run_on_a_terminal_shows_its_progress_and_only_there(tmp_path: Path) -> None:
    """On a terminal, `pomo run` draws its progress (epochs done of all, their rate, the time
    gone) while it works; its output redirected, or with ``--quiet``, nothing of it; the
    results are the same either way."""
    corpus, events = setup(tmp_path)
    run = ("run", str(corpus), "--events", str(events), "--epoch", "10ms", "--times", "any")
    code, shown = _on_a_terminal(*run)
    assert code == 0, shown
    assert "evaluating" in shown and "5 of 5 epochs" in shown and "epochs/s" in shown, shown
    assert "avg (2 events)" in shown
    code, quiet = _on_a_terminal(*run, "--quiet")
    assert code == 0 and "avg (2 events)" in quiet
    assert "evaluating" not in quiet and "epochs/s" not in quiet
    piped = pomo(*run)
    assert piped.returncode == 0 and "evaluating" not in piped.stderr + piped.stdout
    assert "avg (2 events)" in piped.stdout


def test_until_cuts_exactly_at_known_time(tmp_path: Path) -> None:
    corpus, events = setup(tmp_path)
    result = pomo(
        "run", str(corpus), "--events", str(events), "--until", "50", "--engine", "reference"
    )
    assert result.returncode == 0, result.stderr
    assert "avg (1 event)" in result.stdout


def test_exit_codes(tmp_path: Path) -> None:
    corpus, events = setup(tmp_path)
    bad = tmp_path / "bad.pomo"
    bad.write_text("p(x) := ;\n")
    assert pomo("run", str(bad), "--events", str(events)).returncode == 1
    assert pomo("run", str(corpus), "--events", str(events), "--epoch", "soon").returncode == 2
    assert pomo("run", str(corpus)).returncode == 2
    # One rule for paths that are not there: how the command was called, exit 2.
    missing = tmp_path / "missing"
    for args in (
        ("run", str(corpus), "--events", str(missing)),
        ("run", str(missing), "--events", str(events)),
        ("check", str(missing)),
        ("explain", str(corpus), "--events", str(missing), 'avg("a")'),
    ):
        result = pomo(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "missing: no such file or folder" in result.stderr, result.stderr


def test_the_summary_gives_epochs_in_readable_times_and_says_when_none_can_run(
    tmp_path: Path,
) -> None:
    corpus, events = setup(tmp_path)
    run = ("run", str(corpus), "--events", str(events), "--engine", "reference")
    result = pomo(*run, "--epoch", "25ms")
    assert result.returncode == 0, result.stderr
    summary = result.stderr.splitlines()[0]
    assert summary.startswith(
        f"{corpus}: 3 epochs of 25ms, 1970-01-01T00:00:00Z to 1970-01-01T00:00:00.075Z; "
        "4 lines read, 2 accepted, 2 quarantined"
    ), summary
    # --until before --start: nothing to run, said as a usage error.
    result = pomo(*run, "--start", "1970-01-01T00:00:01Z", "--until", "500")
    assert result.returncode == 2
    assert "--until 500 is not after --start 1970-01-01T00:00:01Z" in result.stderr
    # --until before the first event's epoch: a run of no epoch, and the reason why.
    late = tmp_path / "late.jsonl"
    late.write_text('{"relation": "r", "t": "2024-05-01T10:20:00Z", "args": ["a", 1.0]}\n')
    result = pomo(
        "run", str(corpus), "--events", str(late), "--engine", "reference", "--until", "2023-01-01"
    )
    assert result.returncode == 0, result.stderr
    assert "avg (0 events)" in result.stdout
    assert (
        "no epoch to evaluate: the first would start at 2024-05-01T10:00:00Z, "
        "not before --until 2023-01-01T00:00:00Z; 1 line read, 1 accepted"
    ) in result.stderr


def test_generate_checks_its_options_and_starts_where_asked(tmp_path: Path) -> None:
    out = tmp_path / "tanks.jsonl"
    for bad in (["--tanks", "0"], ["--hours", "0"], ["--readings", "-5"], ["--start", "soon"]):
        result = pomo("generate", "water_tanks", *bad, "--out", str(out))
        assert result.returncode == 2, (bad, result.stderr)
        assert result.stderr.startswith("pomo: error: "), result.stderr
    assert not out.exists()
    made = pomo(
        "generate", "water_tanks", "--readings", "60", "--hours", "1", "--start", "2026-01-01",
        "--out", str(out),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "from 2026-01-01T00:00:00Z" in made.stdout
    times = [json.loads(line)["t"] for line in out.read_text().splitlines()]
    assert min(times) == 1_767_225_600_000 and max(times) < 1_767_225_600_000 + 3_600_000


def test_generated_example_events_are_all_accepted(tmp_path: Path) -> None:
    out = tmp_path / "landing" / "tanks.jsonl"
    made = pomo("generate", "water-tanks", "--readings", "300", "--hours", "2", "--out", str(out))
    assert made.returncode == 0, made.stderr
    result = pomo(
        "run",
        "rules/water_tanks.pomo",
        "--events",
        str(out.parent),
        "--engine",
        "reference",
        "--out",
        str(tmp_path / "out"),
    )
    assert result.returncode == 0, result.stderr
    lines = out.read_text().splitlines()
    assert len(lines) >= 300 and f"{len(lines)} lines read, {len(lines)} accepted" in result.stderr
    last = max(json.loads(line)["t"] for line in lines)
    versions = window_versions(lines, 10 * 60_000, (last // 3_600_000 + 1) * 3_600_000)
    assert len((tmp_path / "out" / "level_10m.jsonl").read_text().splitlines()) == versions


def test_pomo_demo_runs_the_pipeline_through_dagster_and_reports_actions(tmp_path: Path) -> None:
    """`pomo demo` on a terminal, as a user runs it: its progress while Dagster works (the
    asset partitions done of all, read from the run's instance), then what was derived
    and done."""
    code, out = _on_a_terminal("demo", "--dir", str(tmp_path / "demo"))
    assert code == 0, out[-3000:]
    assert "materializing" in out and "33 of 33 asset partitions" in out, out
    out = out.replace("\r\n", "\n")
    assert "3 hourly partitions" in out
    derived = dict(
        (line.split()[0], int(line.split()[1].replace(",", "")))
        for line in out.split("3. derived")[1].split("4. actions")[0].splitlines()[1:]
    )
    assert derived["water_level"] == 9_000 and derived["overflow_alert"] > 0
    ran = {
        line.split()[0]: int(line.split()[1].replace(",", ""))
        for line in out.splitlines()
        if line.endswith(" ran")
    }
    # One call per alert: its stored versions (one each time a later reading of its
    # minute revised the average it rests on) are one event.
    stored = tmp_path / "demo" / "warehouse" / "water_tanks"
    alerts = pq.read_table(stored / "overflow_alert").select(["tank", "t"]).to_pylist()
    assert len(alerts) == derived["overflow_alert"]
    events = {(a["tank"], a["t"]) for a in alerts}
    assert ran == {"log_maintenance": 1, "notify_operator": len(events)}
    assert (stored / "_actions.sqlite").is_file()


def test_pomo_demo_keeps_its_ledger_in_postgres_and_a_second_demo_runs_nothing_again(
    tmp_path: Path, postgres: str
) -> None:
    """`pomo demo --ledger postgresql://...` as documented: the actions of the first demo
    recorded in the database, none handed over by a second one on the same database."""
    from tests.postgres import new_database

    url = new_database(postgres)
    demo = ("demo", "--ledger", url)
    first = pomo(*demo, "--dir", str(tmp_path / "one"))
    assert first.returncode == 0, first.stderr[-3000:]
    assert "materializing" not in first.stderr, "no progress where stderr is no terminal"
    assert f"the ledger: {url}" in first.stdout
    ran = {
        line.split()[0]: int(line.split()[1].replace(",", ""))
        for line in first.stdout.splitlines()
        if line.endswith(" ran")
    }
    assert ran["notify_operator"] > 0
    assert not (tmp_path / "one" / "warehouse" / "water_tanks" / "_actions.sqlite").exists()
    from dagster_pomo.engine.actions import open_ledger

    with open_ledger(url, "water_tanks") as led:
        assert led.counts("notify_operator") == {"done": ran["notify_operator"]}
    second = pomo(*demo, "--dir", str(tmp_path / "two"))
    assert second.returncode == 0, second.stderr[-3000:]
    assert [line for line in second.stdout.splitlines() if line.endswith(" ran")] == [
        f"   {name:<20} {0:>9,} ran" for name in sorted(ran)
    ]


CONNECT_RUNS = """
import json, sys
from pathlib import Path
from dagster_pomo.cli.main import main
from dagster_pomo.engine.policy import Policy
from dagster_pomo.engine.run import run
from dagster_pomo.lang import load_program

code = main(sys.argv[2:])
if code:
    raise SystemExit(code)
few = Policy(lower_rows=5)
result = run(load_program(Path(sys.argv[1])), None, 3_600_000, 0, 3_600_000, policy=few)
print("counter:", json.dumps(sorted(v.args for v in result.events("c"))))
"""


def test_spark_connect_gives_what_the_reference_gives(tmp_path: Path) -> None:
    """`POMO_SPARK_REMOTE` runs the engine through a Spark Connect client (here a local
    server), its landing read by Spark's tasks: recursion (linear, in Spark's tasks; and
    non-linear, worked out in this process from versions Spark brings, across two epochs),
    a sliding aggregate over numbers and one over words all agree, and a bad line is
    quarantined as the reference run's reading has it. A self-joining recursion on
    Spark's rounds ends there too: a round's stored piece kept the size estimate of the
    plan it came from, out of reach under Connect, and the self-join squared it every
    round (thirty single-row rounds of the counter were still being planned after
    minutes; twelve square it past any size); each piece now goes through files, whose
    estimate is their size."""
    corpus = tmp_path / "mixed.pomo"
    corpus.write_text(
        """.decl edge(a: int, b: int);
path(a, b) := edge(a, b);
path(a, c) := path(a, b) ^ edge(b, c);
.decl r(k: str, w: str, x: float) lifetime 100;
stats(k) @average(x) @max(x) := r(k, _, x);
first(k) @min(w) := r(k, w, _);
.decl c(x: int, n: int);
c(0, 30);
c(x + 1, n) := c(x, _) ^ c(_, n) if x < n;
"""
    )
    events = tmp_path / "events.jsonl"
    lines = [{"relation": "edge", "t": t, "args": [t, (t + 1) % 4]} for t in range(4)]
    lines += [
        {"relation": "r", "t": t, "args": ["a", w, x]}
        for t, w, x in ((10, "pear", 10.0), (50, "fig", 20.0), (130, "kiwi", 40.0))
    ]
    events.write_text("".join(json.dumps(line) + "\n" for line in lines) + "not an event\n")
    # A recursion reading more versions than `Policy.lower_rows` is given back to Spark's
    # rounds (nothing stored before): `c` beside ten `pad` facts, when it may read five.
    rounds = 12  # each a few seconds under Connect; the estimate squared by round 6
    pads = "".join(f"pad({k});\n" for k in range(10))
    counter = tmp_path / "counter.pomo"
    counter.write_text(
        f".decl pad(k: int);\n{pads}.decl c(x: int, n: int);\nc(0, {rounds});\n"
        "c(x + 1, n) := c(x, _) ^ c(_, n) ^ pad(0) if x < n;\n"
    )
    env = {**os.environ, "POMO_SPARK_REMOTE": "local"}
    outs, said = {}, {}
    for engine in ("spark", "reference"):
        outs[engine] = tmp_path / engine
        args = ["run", str(corpus), "--events", str(events), "--epoch", "80ms", "--times", "any"]
        # the default engine: on Spark Connect, Spark's plans but for the counter's rounds
        args += ["--engine", "auto" if engine == "spark" else engine, "--out", str(outs[engine])]
        args += ["--landing-reader", "spark"] if engine == "spark" else []
        if engine == "spark":  # then the counter, in the same process and session
            command = [sys.executable, "-c", CONNECT_RUNS, str(counter), *args]
        else:
            command = [str(POMO), *args]
        result = subprocess.run(
            command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=900, check=False
        )
        assert result.returncode == 0, result.stderr[-3000:]
        said[engine] = result.stdout + result.stderr
    assert "spark: local\n" in said["spark"]  # the Connect URL, not a master such as local[*]
    got = json.loads(said["spark"].split("counter: ")[1].splitlines()[0])
    assert got == [[x, rounds] for x in range(rounds + 1)]
    for name in ("path", "stats", "first", "c", "_quarantine"):
        spark = (outs["spark"] / f"{name}.jsonl").read_text()
        assert spark == (outs["reference"] / f"{name}.jsonl").read_text(), name
    found = (outs["spark"] / "path.jsonl").read_text().splitlines()
    assert {tuple(json.loads(line)["args"]) for line in found} == {
        (a, b) for a in range(4) for b in range(4)
    }


TEN_MS = ("--epoch", "10ms")


def test_a_violated_check_is_reported_and_fails_the_run_with_exit_code_4(tmp_path: Path) -> None:
    corpus = tmp_path / "levels.pomo"
    corpus.write_text(
        ".decl level(tank: str, x: float);\n"
        ".check negative(tank, x) := level(tank, x) if x < 0.0;\n"
        ".check high(tank) @warn := level(tank, x) if x > 90.0;\n"
        ".check empty(tank) := level(tank, x) if x == 0.0;\n"
    )
    events = tmp_path / "events.jsonl"
    lines = [("north", 10.0, 5), ("north", -3.0, 7), ("south", 95.0, 9), ("north", -1.0, 12)]
    events.write_text(
        "".join(
            json.dumps({"relation": "level", "t": t, "args": [k, x]}) + "\n" for k, x, t in lines
        )
    )
    done = pomo("run", str(corpus), "--events", str(events), "--engine", "reference", *TEN_MS)
    assert done.returncode == 4, done.stderr
    assert 'check negative: failed, 2 violations (first: negative("north", -3.0) at ' in done.stderr
    assert "check high: warning, 1 violation" in done.stderr
    assert "check empty: ok" in done.stderr
    # Warnings alone do not fail a run.
    corpus.write_text(
        ".decl level(tank: str, x: float);\n"
        ".check high(tank) @warn := level(tank, x) if x > 90.0;\n"
    )
    done = pomo("run", str(corpus), "--events", str(events), "--engine", "reference", *TEN_MS)
    assert done.returncode == 0, done.stderr
    assert "check high: warning, 1 violation" in done.stderr


def test_outputs_written_from_spark_are_the_bytes_of_the_merged_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--out` on Spark merges, sorts and streams each relation's events from the warehouse,
    by Spark's workers, or by this process from Arrow columns (all at once, or a range of
    times at a time), or read into this process when the warehouse holds few of them; every
    way the files are byte for byte those of
    the versions merged in this process (floats and text, aggregates, versions of one event,
    future-stamped and deferred events, expiry included)."""
    from dagster_pomo.engine import event_lines
    from dagster_pomo.engine.run import run, write_outputs
    from dagster_pomo.engine.spark import warehouse
    from dagster_pomo.examples import water_tank_events
    from dagster_pomo.lang import load_program
    from tests.conftest import RULES

    landing = tmp_path / "readings.jsonl"
    water_tank_events(landing, 3000, tanks=3, hours=2)
    program = load_program(RULES / "water_tanks.pomo")
    collected = run(program, landing, 3_600_000)
    write_outputs(collected, tmp_path / "collected")
    read_here = run(program, landing, 3_600_000, out=tmp_path / "here")
    monkeypatch.setattr(warehouse, "LOCAL_ROWS", 0)  # no relation is few: Arrow writes
    arrow = run(program, landing, 3_600_000, out=tmp_path / "arrow")
    monkeypatch.setattr(event_lines, "HELD", 100)  # a range of times at a time, each epoch's
    cut = event_lines.time_slices
    ranges: list[int] = []
    monkeypatch.setattr(
        event_lines, "time_slices", lambda *a: ranges.append(len(cut(*a))) or cut(*a)
    )
    sliced = run(program, landing, 3_600_000, out=tmp_path / "sliced")
    assert max(ranges) > 1
    # A relation larger than `ROWS` whose epochs each hold fewer: still this process's,
    # a range of times at a time.
    largest = max(len(collected.events(n)) for n in collected.outputs)
    monkeypatch.setattr(event_lines, "ROWS", largest - 1)
    write, by_arrow = event_lines.write, []

    def spied(reads: list, schema: Schema, *args: object) -> int:
        by_arrow.append(schema.name)
        return write(reads, schema, *args)

    monkeypatch.setattr(event_lines, "write", spied)
    bounded = run(program, landing, 3_600_000, out=tmp_path / "bounded")
    biggest = max(collected.outputs, key=lambda n: len(collected.events(n)))
    assert biggest in by_arrow, by_arrow
    monkeypatch.setattr(event_lines, "ROWS", -1)  # nor one for Arrow: Spark's workers write
    streamed = run(program, landing, 3_600_000, out=tmp_path / "streamed")
    assert list((tmp_path / "streamed").glob(".*.parts")) == [], "Spark's parts cleaned up"
    for done in (read_here, arrow, sliced, bounded, streamed):
        assert done.written == {n: len(collected.events(n)) for n in collected.outputs}
    assert sum(streamed.written.values()) > 3000
    for name in [*collected.outputs, "_quarantine"]:
        file = f"{name}.jsonl"
        expected = (tmp_path / "collected" / file).read_bytes()
        for way in ("here", "arrow", "sliced", "bounded", "streamed"):
            assert (tmp_path / way / file).read_bytes() == expected, (way, name)


INT_CORPUS = """.decl e(x: int, y: int) lifetime 1h;
.decl on(x: int, lit: bool);
path(x, y) := e(x, y);
path(x, z) := path(x, y) ^ e(y, z);
degree(x) @count @sum(y) := e(x, y);
lit(x, b) := on(x, b) ^ e(x, _);
seen(x, b) := on(x, b);
"""


def test_integer_outputs_written_by_spark_alone_are_the_bytes_python_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relation of integers, times and booleans (aggregates too) is formatted by Spark
    itself, with no Python worker, or by this process from Arrow columns: the files are
    byte for byte what the versions merged in this process one by one give (`exp` null or
    a time, an aggregate's key and value)."""
    from dagster_pomo.engine import event_lines
    from dagster_pomo.engine.lines import ANY_TIME
    from dagster_pomo.engine.run import run, write_outputs
    from dagster_pomo.engine.spark import results, warehouse
    from dagster_pomo.lang import compile_corpus

    program = compile_corpus(INT_CORPUS, "ints.pomo")
    events = [{"relation": "e", "t": i * 600_000, "args": [i % 7, (i * 3) % 7]} for i in range(30)]
    events += [{"relation": "on", "t": i * 60_000, "args": [i, i % 2 == 0]} for i in range(7)]
    landing = tmp_path / "e.jsonl"
    landing.write_text("".join(json.dumps(e) + "\n" for e in events))
    collected = run(program, landing, 3_600_000, window=ANY_TIME)
    write_outputs(collected, tmp_path / "collected")
    monkeypatch.setattr(warehouse, "LOCAL_ROWS", 0)  # no relation is few: ...
    arrow = run(program, landing, 3_600_000, out=tmp_path / "arrow", window=ANY_TIME)
    monkeypatch.setattr(event_lines, "ROWS", -1)  # ... nor one for Arrow: Spark writes
    formatted = []
    original = results._json_line

    def counted(schema, keys):
        line = original(schema, keys)
        formatted.append((schema.name, line is not None))
        return line

    monkeypatch.setattr(results, "_json_line", counted)
    streamed = run(program, landing, 3_600_000, out=tmp_path / "spark", window=ANY_TIME)
    assert sorted(formatted) == [(n, True) for n in ("degree", "lit", "path", "seen")]
    assert streamed.written == {n: len(collected.events(n)) for n in collected.outputs}
    assert all(streamed.written.values())
    for name in collected.outputs:
        file = f"{name}.jsonl"
        expected = (tmp_path / "collected" / file).read_bytes()
        assert (tmp_path / "spark" / file).read_bytes() == expected, name
        assert (tmp_path / "arrow" / file).read_bytes() == expected, name
    assert arrow.written == streamed.written
    assert '"exp": null' in (tmp_path / "spark" / "seen.jsonl").read_text()  # never expires
    assert '"exp": null' not in (tmp_path / "spark" / "path.jsonl").read_text()
    assert '"aggregates": {"count": ' in (tmp_path / "spark" / "degree.jsonl").read_text()
