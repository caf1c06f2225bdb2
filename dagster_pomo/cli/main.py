"""Entry point of the ``pomo`` command.

Exit codes: 0 success, 1 a corpus or input error (reported on stderr as
``FILE:LINE:COL: message`` with a caret), 2 a usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from dagster_pomo import __version__
from dagster_pomo.lang import CorpusError, Program, load_program

EXIT_OK, EXIT_CORPUS, EXIT_USAGE = 0, 1, 2


class _Usage(Exception):
    """A problem with how the command was called (exit code 2)."""


def _corpus_files(paths: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(path.glob("*.pomo"))
            if not found:
                raise _Usage(f"{raw}: no *.pomo files in this folder")
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
    for warning in program.warnings:
        print(warning.render(program.source), file=sys.stderr)
    return program


def cmd_check(args: argparse.Namespace) -> int:
    status = EXIT_OK
    for path in _corpus_files(args.files):
        program = _load(path)
        if program is None:
            status = EXIT_CORPUS
            continue
        rules = len(program.corpus.rules)
        relations = sum(1 for _ in program.catalog)
        print(f"{path}: ok ({rules} rules, {relations} relations, {len(program.strata)} strata)")
    return status


def cmd_strata(args: argparse.Namespace) -> int:
    from dagster_pomo.cli.strata_report import dot_report, text_report

    (path,) = _corpus_files([args.file])
    program = _load(path)
    if program is None:
        return EXIT_CORPUS
    sys.stdout.write(dot_report(program) if args.dot else text_report(program))
    return EXIT_OK


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
        description="Check rule corpora; errors go to stderr as FILE:LINE:COL: message.",
    )
    check.add_argument("files", nargs="+", metavar="FILE", help="a *.pomo file or a folder of them")
    check.set_defaults(func=cmd_check)

    strata = sub.add_parser(
        "strata",
        help="show the strata in evaluation order and the dependency graph",
        description="Show strata, their rules, and the dependency graph of a corpus.",
    )
    strata.add_argument("file", metavar="FILE")
    strata.add_argument("--dot", action="store_true", help="print Graphviz DOT instead of text")
    strata.set_defaults(func=cmd_strata)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except _Usage as exc:
        parser.exit(EXIT_USAGE, f"pomo: error: {exc}\n")
    except BrokenPipeError:  # e.g. `pomo strata x | head`
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
