"""``pomo strata`` output: the evaluation order as text, or as Graphviz DOT."""

from __future__ import annotations

import json
import re

from dagster_pomo.lang import Program, ast
from dagster_pomo.lang.render import render_const
from dagster_pomo.lang.stratify import precedence_edges


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _signature(program: Program, name: str) -> str:
    rel = program.catalog[name]
    cols = ", ".join(f"{c}: {t}" if t else c for c, t in zip(rel.columns, rel.types, strict=True))
    text = f"{name}({cols})"
    if rel.lifetime is not None:
        text += " lifetime " + render_const(ast.Const(rel.lifetime, "duration"))
    return text


def _dependencies(program: Program) -> dict[str, list[str]]:
    deps: dict[str, list[str]] = {}
    for rule in program.corpus.rules:
        if not rule.body:
            continue
        agg = bool(rule.aggregates)
        for lit in rule.body:
            mark = "!" if lit.negated else ("agg " if agg or lit.aggregation else "")
            kind = "@async " if rule.is_async else "@next "
            mark = (kind if rule.is_inductive else "") + mark
            entry = mark + lit.atom.relation
            head = deps.setdefault(rule.head.relation, [])
            if entry not in head:
                head.append(entry)
    return deps


def text_report(program: Program) -> str:
    lines = [f"corpus {program.name} ({program.source.name}): {len(program.strata)} strata", ""]
    inputs = [r.name for r in program.catalog.inputs]
    lines.append("inputs:")
    lines += [f"  {_signature(program, n)}" for n in inputs] or ["  (none)"]
    for stratum in program.strata:
        tags = []
        if stratum.recursive:
            tags.append("recursive")
        if stratum.inductive:
            tags.append("@next, evaluated last in each epoch; results land in the next")
        tag = f" ({'; '.join(tags)})" if tags else ""
        lines += ["", f"stratum {stratum.index}{tag}: {', '.join(stratum.relations)}"]
        for rule in stratum.rules:
            lines.append(f"  {rule.span.line:>4}  {_one_line(program.rule_text(rule))}")
    subscriptions = [(r, h) for r in program.catalog for h in r.handlers]
    if subscriptions:
        lines += ["", "actions:"]
        lines += [f"  {h} <- {r.name}" for r, h in subscriptions]
    lines += ["", "dependencies (negation `!`, aggregation `agg`, previous epoch `@next`):"]
    lines += [f"  {head} <- {', '.join(body)}" for head, body in _dependencies(program).items()]
    return "\n".join(lines) + "\n"


def _q(name: str) -> str:
    return json.dumps(name)


def dot_report(program: Program) -> str:
    """Data flows along the arrows: from body relations to heads, then to actions."""
    out = [f"digraph {_q(program.name)} {{", "  rankdir=LR;", '  node [fontname="Helvetica"];']
    for rel in program.catalog.inputs:
        out.append(f'  {_q(rel.name)} [shape=box, style=filled, fillcolor="#e8f0fe"];')
    if "clock" in program.catalog:
        out.append('  "clock" [shape=diamond, label="clock (built in)"];')
    for stratum in program.strata:
        label = f"stratum {stratum.index}" + (" (@next)" if stratum.inductive else "")
        out.append(f"  subgraph {_q(f'cluster_{stratum.index}')} {{")
        out.append(f"    label={_q(label)}; style=rounded;")
        out += [
            f"    {_q(n + ('@next' if stratum.inductive else ''))} [label={_q(n)}];"
            for n in stratum.relations
        ]
        out.append("  }")
    seen: set[tuple[str, str, str]] = set()
    for e in precedence_edges(program.corpus):
        style = "dashed" if e.negative else "solid"
        key = (e.body, e.head, style)
        if key not in seen:
            seen.add(key)
            label = (
                ', label="not"' if e.literal.negated else (', label="agg"' if e.negative else "")
            )
            out.append(f"  {_q(e.body)} -> {_q(e.head)} [style={style}{label}];")
    for rule in program.corpus.rules:
        if rule.is_inductive:
            for lit in rule.body:
                style = "dashed" if lit.negated else "solid"
                key = (lit.atom.relation, rule.head.relation + "@next", style)
                if key not in seen:
                    seen.add(key)
                    out.append(f"  {_q(key[0])} -> {_q(key[1])} [style={style}];")
    for rel in program.catalog:
        for handler in rel.handlers:
            node = f"~{handler}"
            out.append(f'  {_q(node)} [shape=cds, style=filled, fillcolor="#fde8e8"];')
            out.append(f"  {_q(rel.name)} -> {_q(node)};")
    out.append("}")
    return "\n".join(out) + "\n"
