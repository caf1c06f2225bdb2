"""Entry point of the ``pomo`` command.

Exit codes: 0 success, 1 a corpus or input error (reported on stderr as
``FILE:LINE:COL: message`` with a caret), 2 a usage error, 3 an internal error (a bug:
one line on stderr, the traceback in a file it names).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from dagster_pomo import __version__
from dagster_pomo.engine.budgets import BudgetExceeded, Budgets
from dagster_pomo.engine.lines import printable
from dagster_pomo.engine.policy import DEFAULT
from dagster_pomo.errors import PomoError, SettingsError, UsageError
from dagster_pomo.lang import CorpusError, Program, load_program
from dagster_pomo.lang.errors import render_all

if TYPE_CHECKING:
    from dagster_pomo.engine.driver import PassStats
    from dagster_pomo.engine.inputs import EpochRange
    from dagster_pomo.engine.lines import TimeWindow
    from dagster_pomo.engine.run import RunResult

EXIT_OK, EXIT_CORPUS, EXIT_USAGE, EXIT_INTERNAL, EXIT_VIOLATED = 0, 1, 2, 3, 4
# `--landing-reader`: the landing bytes beyond which Spark's tasks read it (`Policy`).
LANDING_READERS = {"auto": DEFAULT.spark_landing_bytes, "spark": 0, "process": -1}


class _Usage(Exception):
    """A problem with how the command was called (exit code 2): an unknown option, a value
    it cannot take, a corpus or events path that is not there. A corpus that does not
    check, a run that cannot go on (a Spark master that cannot be reached) exit 1; a bug 3;
    a violated `.check` 4 (docs/operations.md, "Exit codes")."""


def _corpus_files(paths: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted([*path.glob("*.pomo"), *path.glob("*.pomologic")])
            if not found:
                raise _Usage(f"{raw}: no *.pomo or *.pomologic files in this folder")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise _Usage(f"{raw}: no such file or folder")
    return files


def _load(path: Path) -> Program | None:
    """The checked program, or ``None`` after printing its diagnostics to stderr."""
    try:
        program = load_program(path)
    except CorpusError as exc:
        print(exc.render(), file=sys.stderr)
        n = len(exc.errors)
        print(f"{path}: {n} error{'s' if n != 1 else ''}", file=sys.stderr)
        return None
    except UsageError as exc:  # e.g. a file name that cannot name a corpus
        print(f"{path}: {exc}", file=sys.stderr)
        return None
    if program.warnings:
        print(render_all(program.source, program.warnings), file=sys.stderr)
    return program


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def cmd_check(args: argparse.Namespace) -> int:
    status = EXIT_OK
    for path in _corpus_files(args.files):
        program = _load(path)
        if program is None:
            status = EXIT_CORPUS
            continue
        rules = len(program.corpus.rules)
        relations = sum(1 for _ in program.catalog)
        n = len(program.warnings)
        warned = f"; {n} warning{'s' if n != 1 else ''}" if n else ""
        print(
            f"{path}: ok ({_count(rules, 'rule')}, {_count(relations, 'relation')}, "
            f"{_count(len(program.strata), 'stratum', 'strata')}{warned})"
        )
    return status


def _print_for(args: argparse.Namespace, report: Callable[[Program], str]) -> int:
    """What ``report`` makes of the checked corpus ``args.file``, on stdout."""
    (path,) = _corpus_files([args.file])
    program = _load(path)
    if program is None:
        return EXIT_CORPUS
    sys.stdout.write(report(program))
    return EXIT_OK


def cmd_strata(args: argparse.Namespace) -> int:
    from dagster_pomo.cli.strata_report import dot_report, text_report

    return _print_for(args, dot_report if args.dot else text_report)


def cmd_plan(args: argparse.Namespace) -> int:
    from dagster_pomo.plan.corpus import compile_plan
    from dagster_pomo.plan.schema import infer_schemas
    from dagster_pomo.plan.text import render_plan

    return _print_for(args, lambda p: render_plan(compile_plan(p, infer_schemas(p, {}))))


def cmd_convert(args: argparse.Namespace) -> int:
    from dagster_pomo.lang.pomologic import to_pomologic

    return _print_for(args, to_pomologic)


def cmd_run(args: argparse.Namespace) -> int:
    from dagster_pomo.engine.run import format_tables, write_outputs

    for flag, given in (("--out", args.out), ("--changes", args.changes)):
        if given and Path(given).exists() and not Path(given).is_dir():
            raise _Usage(f"{flag} {given} is a file; name a folder to write in")
    if args.engine == "reference" and (args.warehouse or args.changes):
        raise _Usage("--warehouse and --changes need a warehouse: the reference keeps none")
    done = _evaluate(args, Path(args.out) if args.out else None)
    if isinstance(done, int):
        return done
    result = done
    if args.out:
        counts = write_outputs(result, Path(args.out))
        for name, n in counts.items():
            print(f"{Path(args.out) / (name + '.jsonl')}: {n:,} event{'s' if n != 1 else ''}")
    else:
        sys.stdout.write(format_tables(result, limit=50))
    for name, (added, withdrawn) in (result.changed or {}).items():
        print(f"{Path(args.changes) / (name + '.jsonl')}: {added:,} added, {withdrawn:,} withdrawn")
    return _report_checks(result)


def _evaluate(
    args: argparse.Namespace, out: Path | None = None, explaining: bool = False
) -> RunResult | int:
    """The corpus evaluated over its events as `run` and `explain` are asked to (its outputs
    written to ``out``, when given, as it goes), with what was read and quarantined said on
    stderr; or the exit code of a failure, said. An explanation needs the input events in
    this process: it reads them here."""
    from dagster_pomo.cli.progress import run_progress, wanted
    from dagster_pomo.engine.lines import parse_window
    from dagster_pomo.engine.policy import Policy
    from dagster_pomo.engine.reference import EvaluationError
    from dagster_pomo.engine.run import run
    from dagster_pomo.timeline import parse_duration, parse_time

    (path,) = _corpus_files([args.file])
    try:
        _register_lattices(args)
        budgets = DEFAULT.budgets.with_settings(args.budget or [])
        size = parse_duration(args.epoch)
        start = _time_option("--start", args.start, parse_time)
        until = _time_option("--until", args.until, parse_time)
        window = _time_option("--times", args.times, parse_window)
    except UsageError as exc:
        raise _Usage(str(exc)) from None
    if start is not None and until is not None and until <= start:
        raise _Usage(f"--until {args.until} is not after --start {args.start}: no epoch to run")
    if not Path(args.events).exists():
        raise _Usage(f"{args.events}: no such file or folder of events")
    settings = _spark_settings(args)
    program = _load(path)
    if program is None:
        return EXIT_CORPUS
    try:
        if args.engine in ("auto", "spark"):
            from dagster_pomo.engine.driver import describe_session

            print(f"spark: {describe_session(settings)}", file=sys.stderr)
        reader = "process" if explaining else args.landing_reader
        policy = Policy(
            one_pass=not args.epoch_by_epoch,
            spark_landing_bytes=LANDING_READERS[reader],
            in_process_inputs=args.in_process_inputs,
            budgets=budgets,
        )
        with run_progress(wanted(sys.stderr, args.quiet)) as progress:
            result = run(
                program,
                args.events,
                size,
                start,
                until,
                engine=args.engine,
                window=window,
                policy=policy,
                out=out,
                settings=settings,
                progress=progress,
                warehouse=getattr(args, "warehouse", None),
                changes=Path(args.changes) if getattr(args, "changes", None) else None,
            )
    except BudgetExceeded as exc:  # said at its rule, in the corpus
        print(exc, file=sys.stderr)
        return EXIT_CORPUS
    except (EvaluationError, PomoError) as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        return EXIT_CORPUS
    ingested = result.ingested
    plan = result.epoch_range
    bad = ingested.quarantined_count
    print(
        f"{path}: {_epochs_summary(plan, size, ingested.accepted > 0)}; "
        f"{ingested.lines_read:,} line{'s' if ingested.lines_read != 1 else ''} read, "
        f"{ingested.lines_read - bad:,} accepted, {bad:,} quarantined"
        f"{_repeats_summary(ingested.repeats)}{_withdrawn_summary(ingested.withdrawn)}"
        f"{_passes_summary(result.passes)}",
        file=sys.stderr,
    )
    _note_facts_before(program, plan)
    for q in ingested.quarantined[:10]:
        print(q.shown("quarantined: "), file=sys.stderr)
    if bad > 10:
        print(f"... and {bad - 10} more", file=sys.stderr)
    return result


def _register_lattices(args: argparse.Namespace) -> None:
    """The lattices ``--lattice NAME=module:function`` names, imported and registered."""
    from dagster_pomo.engine.lattices import load_lattice, register_lattice

    for spec in args.lattice:
        register_lattice(*load_lattice(spec))


def cmd_explain(args: argparse.Namespace) -> int:
    from dagster_pomo.engine.explain import explain_run
    from dagster_pomo.engine.lines import parse_window
    from dagster_pomo.timeline import parse_time

    at = _time_option("--at", args.at, parse_time)
    window = _time_option("--times", args.times, parse_window)
    try:
        if args.warehouse:
            found = _explain_stored(args, at, window)
        else:
            done = _evaluate(args, explaining=True)
            if isinstance(done, int):
                return done
            found = explain_run(done, args.event, at, args.events, window)
    except SettingsError as exc:  # the command was right; the Spark it names is not there
        print(f"pomo: {exc}", file=sys.stderr)
        return EXIT_CORPUS
    except UsageError as exc:
        raise _Usage(str(exc)) from None
    if args.json:
        print(json.dumps([d.to_json() for d in found], indent=2))
    else:
        for derivation in found:
            print("\n".join(derivation.render()))
    if not found:
        print(
            f"no event {args.event}" + (f" at {args.at}" if at is not None else ""), file=sys.stderr
        )
        return EXIT_CORPUS
    return EXIT_OK


def _explain_stored(args: argparse.Namespace, at: int | None, window: TimeWindow) -> list:
    """`explain --warehouse`: from what a pipeline stored, with no evaluation."""
    _register_lattices(args)
    from dagster_pomo.engine.explain import explain_warehouse
    from dagster_pomo.timeline import parse_duration

    (path,) = _corpus_files([args.file])
    program = _load(path)
    if program is None:
        raise UsageError(f"{path} does not check")
    size = parse_duration(args.epoch)
    return explain_warehouse(
        program, args.warehouse, size, args.event, at, args.events, window, _spark_settings(args)
    )


def _report_checks(result: RunResult) -> int:
    """One line per `.check` of the corpus: how many violations, and the first; exit code 4
    when an error-level check has one (a `@warn` check only reports)."""
    from dagster_pomo.timeline import show_time

    status = EXIT_OK
    for found in result.violations():
        n = len(found.events)
        if not n:
            print(f"check {found.relation}: ok", file=sys.stderr)
            continue
        first = found.events[0]
        args = ", ".join(json.dumps(v) for v in first.args)
        level = "failed" if found.severity == "error" else "warning"
        print(
            f"check {found.relation}: {level}, {n:,} violation{'s' if n != 1 else ''} "
            f"(first: {found.relation}({args}) at {show_time(first.t)})",
            file=sys.stderr,
        )
        if found.fails:
            status = EXIT_VIOLATED
    return status


def _note_facts_before(program: Program, plan: EpochRange) -> None:
    """A corpus with ``@next`` counts epochs: facts before the first epoch are carried into
    it, not stepped through every epoch since; say so, and how to start earlier."""
    from dagster_pomo.engine.ingest import corpus_facts
    from dagster_pomo.timeline import show_time

    if not plan.epochs or not any(r.is_inductive for r in program.corpus.rules):
        return
    times = [row.t for rows in corpus_facts(program).values() for row in rows]
    if times and min(times) < plan.start:
        print(
            f"note: facts from {show_time(min(times))} lie before the first epoch "
            f"({show_time(plan.start)}); `@next` steps from the first epoch on, not through "
            "the epochs between; pass --start to begin earlier",
            file=sys.stderr,
        )


def _withdrawn_summary(withdrawn: int) -> str:
    """How many events delete lines withdrew (each an insert and a delete line)."""
    if not withdrawn:
        return ""
    return f" ({withdrawn:,} event{'s' if withdrawn != 1 else ''} withdrawn by delete lines)"


def _repeats_summary(repeats: int) -> str:
    """How many accepted lines repeated an event (one event, counted once)."""
    if not repeats:
        return ""
    return f" ({repeats:,} repeat{'s' if repeats != 1 else ''} of an event, kept once)"


def _passes_summary(passes: PassStats | None) -> str:
    """How Spark's run went, for a user tuning ``--in-process-inputs``: in how many passes,
    and whether this process or Spark's plans worked them out."""
    if passes is None or not passes.passes:
        return ""
    n, here = passes.passes, passes.in_process
    if here == n:
        where = "in this process"
    elif here == 0:
        where = "on Spark's plans"
    else:
        where = f"{here:,} in this process, {n - here:,} on Spark's plans"
    return f"; evaluated in {n:,} pass{'es' if n != 1 else ''}, {where}"


def _epochs_summary(plan: EpochRange, size: int, anything: bool) -> str:
    """What the run covered, in times people read (``anything``: events or facts to start at)."""
    from dagster_pomo.timeline import show_duration, show_time

    n = len(plan.epochs)
    if n:
        return (
            f"{n} epoch{'s' if n != 1 else ''} of {show_duration(size)}, "
            f"{show_time(plan.start)} to {show_time(plan.until)}"
        )
    if not anything:
        return "no epoch to evaluate: no events and no facts"
    return (
        f"no epoch to evaluate: the first would start at {show_time(plan.start)}, "
        f"not before --until {show_time(plan.until)}"
    )


def cmd_generate(args: argparse.Namespace) -> int:
    from dagster_pomo.examples import DEFAULT_START, water_tank_events
    from dagster_pomo.timeline import parse_time, show_time

    if min(args.readings, args.tanks, args.hours) < 1:
        raise _Usage("--readings, --tanks and --hours must be at least 1")
    start = _time_option("--start", args.start, parse_time)
    start = DEFAULT_START if start is None else start
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = water_tank_events(
        out, args.readings, tanks=args.tanks, hours=args.hours, start=start, seed=args.seed
    )
    print(
        f"{out}: {lines:,} events ({args.readings:,} readings of {args.tanks} tanks over "
        f"{args.hours} h from {show_time(start)})"
    )
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from dagster_pomo.cli.demo import run_demo
    from dagster_pomo.cli.progress import wanted

    if args.hours < 1 or args.readings < 1:
        raise _Usage("--hours and --readings must be at least 1")
    try:
        return run_demo(
            Path(args.dir) if args.dir else None,
            args.hours,
            args.readings,
            args.ledger,
            progress=wanted(sys.stderr, args.quiet),
        )
    except UsageError as exc:
        raise _Usage(str(exc)) from None


def cmd_jvm_cache(args: argparse.Namespace) -> int:
    from dagster_pomo.engine.jvm_cache import make_archive
    from dagster_pomo.examples import CORPORA, HOUR, water_tank_events

    def readings(path: Path) -> None:  # a few hours of the water tanks: what a run loads
        water_tank_events(path, 6_000, tanks=3, hours=3)

    try:
        return make_archive(CORPORA / "water_tanks.pomo", readings, HOUR)
    except UsageError as exc:
        raise _Usage(str(exc)) from None


def _spark_settings(args: argparse.Namespace):  # noqa: ANN202 - SparkSettings, imported lazily
    from dagster_pomo.engine.settings import SparkSettings

    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _Usage(f"--conf takes KEY=VALUE, not `{item}`")
        conf[key.strip()] = value.strip()
    env = SparkSettings.from_env()
    return SparkSettings(
        master=args.master or env.master, remote=args.remote or env.remote, conf=conf
    )


def _time_option(flag: str, value: str | None, parse) -> int | None:  # noqa: ANN001
    if value is None:
        return None
    try:
        return parse(value)
    except ValueError as exc:
        raise _Usage(f"{flag}: {exc}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pomo",
        description="Temporal Datalog rules as Dagster assets on Spark.",
    )
    parser.add_argument("--version", action="version", version=f"pomo {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = sub.add_parser(
        "check",
        help="report syntax and semantic errors in rule corpora",
        description="Check rule corpora; errors and warnings go to stderr as "
        "FILE:LINE:COL: message. Exit 1 on errors; warnings alone do not fail the check.",
    )
    check.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="a *.pomo or *.pomologic file, or a folder of them",
    )
    check.set_defaults(func=cmd_check)

    def one_file(name: str, func: Callable[[argparse.Namespace], int], **text: str):  # noqa: ANN202
        command = sub.add_parser(name, **text)
        command.add_argument("file", metavar="FILE", help="the corpus (.pomo or .pomologic)")
        command.set_defaults(func=func)
        return command

    strata = one_file(
        "strata",
        cmd_strata,
        help="show the strata in evaluation order and the dependency graph",
        description="Show strata, their rules, and the dependency graph of a corpus.",
    )
    strata.add_argument("--dot", action="store_true", help="print Graphviz DOT instead of text")
    one_file(
        "plan",
        cmd_plan,
        help="show how each rule is evaluated: scans, joins, guards, negations, heads",
        description="Show the plan every engine executes: per stratum, each rule's scans and "
        "how they join, definitions, guards, anti-joins, aggregates and head. Input columns "
        "without a declared type are shown as str (data types them in a run).",
    )
    one_file(
        "convert",
        cmd_convert,
        help="print a corpus in PomoLogic notation",
        description="Print a checked corpus in PomoLogic notation (`head :- body.`, "
        "uppercase variables, named attributes), its comments kept; save it as a "
        "*.pomologic file to use it instead.",
    )

    run = sub.add_parser(
        "run",
        help="evaluate a corpus over events, epoch by epoch, without Dagster",
        description="Evaluate a corpus over events (JSON Lines or Parquet files). Output: one "
        "table per derived relation, or DIR/<relation>.jsonl and DIR/_quarantine.jsonl with "
        "--out.",
    )
    _run_options(run)
    run.add_argument("--out", metavar="DIR", help="write JSON Lines files here")
    run.add_argument(
        "--warehouse",
        metavar="DIR",
        help="keep the warehouse in DIR (default: a temporary one): a later run on it "
        "replaces the epochs it evaluates and records what each one changed",
    )
    run.add_argument(
        "--changes",
        metavar="DIR",
        help='write DIR/<relation>.jsonl: the events the run\'s epochs added ("op": '
        '"insert") and withdrew ("op": "delete") against what --warehouse held before',
    )
    run.set_defaults(func=cmd_run)

    explain = sub.add_parser(
        "explain",
        help="say why an event was derived: its rule and matched events, down to the inputs",
        description="Evaluate a corpus over events as `pomo run` does, then print how each "
        "event matching EVENT was derived: the rule (file:line), the events it matched and "
        "the negated atoms that held, recursively down to input events (landing file and "
        "line), facts and clock ticks.",
    )
    _run_options(explain)
    explain.add_argument(
        "event",
        metavar="EVENT",
        help='the event, written as an atom of constants: `near_capacity("north", _, _)` '
        "(`_` for any value, attributes by name allowed)",
    )
    explain.add_argument("--at", metavar="TIME", help="only the event at TIME (ms or ISO-8601)")
    explain.add_argument(
        "--warehouse",
        metavar="DIR",
        help="explain what this warehouse holds (a Dagster pipeline's; --epoch its partitions' "
        "length) instead of evaluating the events again; --events is its landing folder",
    )
    explain.add_argument("--json", action="store_true", help="print the derivations as JSON")
    explain.set_defaults(func=cmd_explain)

    generate = sub.add_parser(
        "generate",
        help="write synthetic events for an example corpus",
        description="Write deterministic synthetic events as JSON Lines.",
    )
    generate.add_argument(
        "example",
        choices=["water-tanks", "water_tanks"],
        help="the example corpus the events are for (rules/water_tanks.pomo)",
    )
    generate.add_argument(
        "--readings", type=int, default=100_000, help="water-level readings (default 100000)"
    )
    generate.add_argument("--tanks", type=int, default=3, help="tanks (default 3)")
    generate.add_argument(
        "--hours", type=int, default=24, help="hours the readings spread over (default 24)"
    )
    generate.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    generate.add_argument(
        "--start",
        metavar="TIME",
        help="time of the first reading, ISO-8601 or milliseconds "
        "(default 2023-11-14T22:00:00Z, as in the demo)",
    )
    generate.add_argument(
        "--out", required=True, metavar="FILE", help="the JSON Lines file to write"
    )
    generate.set_defaults(func=cmd_generate)

    demo = sub.add_parser(
        "demo",
        help="run the water-tank pipeline through Dagster end to end",
        description="Generate water-tank readings, materialize every epoch of "
        "the example corpus water_tanks.pomo (shipped with the package) through Dagster on "
        "local Spark (a throw-away instance), run "
        "its actions, and print what was derived and done.",
    )
    demo.add_argument("--hours", type=int, default=3, help="hours of readings (default 3)")
    demo.add_argument("--readings", type=int, default=9_000, help="readings (default 9000)")
    demo.add_argument(
        "--dir", metavar="DIR", help="keep the landing files, warehouse and ledger in DIR"
    )
    demo.add_argument(
        "--ledger",
        metavar="WHERE",
        help="the action ledger: a folder, or a postgresql:// URL (default $POMO_LEDGER, "
        "else a SQLite file in the warehouse)",
    )
    demo.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar (there is none where stderr is not a terminal)",
    )
    demo.set_defaults(func=cmd_demo)

    jvm_cache = sub.add_parser(
        "jvm-cache",
        help="make local Spark start faster in every later process",
        description="Run a few water-tank epochs on local Spark and keep the classes its JVM "
        "loaded in a class-data archive (under $POMO_CACHE_DIR, else ~/.cache/dagster-pomo); "
        "later local sessions with the same Java, PySpark and driver memory start from it. "
        "Run it once per "
        "machine or image, e.g. where the Dagster daemon runs.",
    )
    jvm_cache.set_defaults(func=cmd_jvm_cache)
    for name in ("run", "explain", "demo", "jvm-cache"):  # the commands that may start Spark
        sub.choices[name].add_argument(
            "--verbose",
            action="store_true",
            help="show Spark's and the JVM's own log lines (only their errors without it)",
        )
    for name in ("run", "explain"):
        sub.choices[name].add_argument(
            "--quiet",
            action="store_true",
            help="no progress bar (there is none where stderr is not a terminal)",
        )
    return parser


def _non_negative(text: str) -> int:
    """A count given on the command line: a whole number, 0 or more (``_`` allowed)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text} is below 0")
    return n


def _run_options(command: argparse.ArgumentParser) -> None:
    """What `run` and `explain` share: the corpus, its events, the epochs, the engine."""
    from dagster_pomo.engine.lines import DEFAULT_TIMES
    from dagster_pomo.engine.run import ENGINES

    command.add_argument("file", metavar="FILE", help="the corpus (.pomo or .pomologic)")
    command.add_argument(
        "--events",
        required=True,
        metavar="PATH",
        help="a JSON Lines or Parquet file, or a folder of them",
    )
    command.add_argument("--epoch", default="1h", metavar="DUR", help="epoch size (default 1h)")
    command.add_argument(
        "--start",
        metavar="TIME",
        help="start of the first epoch (ms or ISO-8601); default: the first event's "
        "epoch, aligned to multiples of the epoch size",
    )
    command.add_argument(
        "--until",
        metavar="TIME",
        help="produce exactly the events known before TIME; default: the end of "
        "the epoch holding the last event",
    )
    command.add_argument(
        "--times",
        default=str(DEFAULT_TIMES),
        metavar="FROM..UNTIL",
        help="the times input events may have (ISO-8601 or ms; `any` for no bound); events "
        f"outside are quarantined (default {DEFAULT_TIMES}: catches times in seconds and "
        "sentinels such as year 9999)",
    )
    command.add_argument(
        "--engine",
        choices=ENGINES,
        default=ENGINES[0],
        help="where the strata are worked out: `auto` (default), this process for epochs of "
        "up to --in-process-inputs events and Spark for larger ones; `local`, this process "
        "alone, with no Spark or Java; `spark`, Spark's plans alone; `reference`, the "
        "reference evaluator (slow; what the others are tested against)",
    )
    command.add_argument(
        "--epoch-by-epoch",
        action="store_true",
        help="evaluate each epoch on its own, as a schedule does, never a range in one pass "
        "(the results are the same; for checking and timing)",
    )
    command.add_argument(
        "--landing-reader",
        choices=LANDING_READERS,
        default="auto",
        help="who reads the events: `spark`'s tasks (with the same checks and quarantine), "
        "this `process`, or `auto`: Spark's tasks when the landing holds more than "
        f"{DEFAULT.spark_landing_bytes >> 20} MiB (--engine auto or spark)",
    )
    command.add_argument(
        "--budget",
        action="append",
        metavar="NAME=N",
        help="raise or lower a budget for one epoch (repeatable): "
        + ", ".join(f"{n} (default {getattr(DEFAULT.budgets, n):,})" for n in Budgets.names())
        + "; a run past one stops, names the rule and stores nothing of that epoch",
    )
    command.add_argument(
        "--in-process-inputs",
        type=_non_negative,
        default=DEFAULT.in_process_inputs,
        metavar="N",
        help="an epoch of at most N input events is worked out in this process rather than "
        f"by Spark's plans; 0: never (default {DEFAULT.in_process_inputs:,}; lower it on a "
        "small driver or a machine of many cores; --engine auto only)",
    )
    command.add_argument(
        "--master", metavar="URL", help="Spark master (default local[*], or $POMO_SPARK_MASTER)"
    )
    command.add_argument(
        "--remote",
        metavar="URL",
        help="Spark Connect URL, e.g. sc://host:15002 (or $POMO_SPARK_REMOTE)",
    )
    command.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark configuration (repeatable)",
    )
    command.add_argument(
        "--lattice",
        action="append",
        default=[],
        metavar="NAME=MODULE:FUNCTION",
        help='the merge function of `@lattice("NAME", v)` heads, imported (repeatable)',
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from dagster_pomo.engine.settings import quiet_spark_logs

    quiet = nullcontext() if getattr(args, "verbose", False) else quiet_spark_logs()
    try:
        with quiet:
            return int(args.func(args))
    except _Usage as exc:
        parser.exit(EXIT_USAGE, f"pomo: error: {exc}\n")
    except BrokenPipeError:  # e.g. `pomo strata x | head`
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - every other error is ours: say so, keep the trace
        return _internal_error(args, exc)


def _internal_error(args: argparse.Namespace, exc: BaseException) -> int:
    """One line saying this is a bug, the traceback in a file (or on stderr with
    ``POMO_TRACEBACK=1``): a script can tell it from a corpus error by the exit code."""
    import tempfile
    import traceback

    trace = "".join(traceback.format_exception(exc))
    if os.environ.get("POMO_TRACEBACK") == "1":
        sys.stderr.write(trace)
        where = "above"
    else:
        fd, where = tempfile.mkstemp(prefix="pomo-traceback-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(f"pomo {__version__}: {' '.join(sys.argv)}\n{trace}")
    summary = printable((f"{type(exc).__name__}: {exc}".splitlines() or [""])[0][:200])
    print(
        f"pomo: internal error in `pomo {args.command}` ({summary}); this is a bug in "
        f"dagster-pomo, please report it with the traceback {where}",
        file=sys.stderr,
    )
    return EXIT_INTERNAL


def console() -> int:
    """The `pomo` command: `main` in a process of its own, whose memory it settles first
    (`engine.memory`; a caller of `main` in its own process keeps its settings)."""
    from dagster_pomo.engine.memory import settle

    settle()
    return main()


if __name__ == "__main__":
    sys.exit(console())
