"""How a corpus's relations are named and described in Dagster; subclass to customise."""

from __future__ import annotations

import hashlib
from typing import Any

from dagster import AssetKey, MetadataValue, TableColumn, TableSchema

from dagster_pomo.lang import Program
from dagster_pomo.orchestration.metadata import PROVENANCE
from dagster_pomo.plan.schema import PROV, Schema


def code_version(text: str) -> str:
    """A short, stable digest of ``text``: the code version Dagster compares with the one a
    materialization recorded to mark it stale."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class PomoTranslator:
    """Asset keys ``[corpus, relation]``, one group per corpus, the rules as description."""

    def get_asset_key(self, program: Program, relation: str) -> AssetKey:
        return AssetKey([program.name, relation])

    def get_group_name(self, program: Program) -> str:
        return program.name

    def get_description(self, program: Program, relation: str) -> str:
        """What the corpus's comments say of the relation (above its ``.decl`` and above
        each rule deriving it), then its rules as written."""
        decl = program.catalog[relation].decl
        notes = [program.doc_comment(decl)] if decl is not None else []
        derived = _rules_of(program, relation)
        notes += [program.doc_comment(r) for r in derived]
        said = "\n\n".join(n for n in notes if n)
        if not derived:
            text = f"Input events of `{relation}` from the landing files."
            return f"{said}\n\n{text}" if said else text
        rules = "\n\n".join(program.rule_text(r) for r in derived)
        return (f"{said}\n\n" if said else "") + f"```\n{rules}\n```"

    def get_rules(self, program: Program, relation: str) -> str:
        """The rules and facts that derive the relation, as written."""
        return "\n\n".join(program.rule_text(r) for r in _rules_of(program, relation))

    def get_tags(self, program: Program, relation: str) -> dict[str, str]:
        """Tags to filter the Catalog by: whether the relation is an input (from the
        landing files) or derived (by rules), and whether it notifies a handler."""
        rel = program.catalog[relation]
        tags = {"pomo/kind": "input" if rel.is_input else "derived"}
        if any(
            h for r in program.corpus.rules if r.head.relation == relation for h in r.head.handlers
        ):
            tags["pomo/notifies"] = "true"
        return tags

    def get_owners(self, program: Program, relation: str) -> list[str]:
        """Owners (e-mail addresses or ``team:name``) of the relation's asset: none unless a
        subclass says so."""
        return []

    def get_code_version(self, program: Program, relation: str) -> str | None:
        """A digest of what defines the relation (:meth:`Program.definition`), so Dagster
        marks its partitions stale ("code version changed") when its rules, facts or
        declaration change, and not when only layout or comments do."""
        return code_version(program.definition(relation))

    def get_metadata(
        self, program: Program, relation: str, schema: Schema, stratum: int | None
    ) -> dict[str, Any]:
        columns = [TableColumn(c, t) for c, t in zip(schema.columns, schema.types, strict=True)]
        columns += [TableColumn(key, t, description=f"@{fn}") for fn, key, t in schema.aggregates]
        columns += [
            TableColumn("t", "int", description="event time (ms)"),
            TableColumn("kt", "int", description="time it became known (ms)"),
            TableColumn("exp", "int", description="expiry (ms, exclusive)"),
        ]
        if schema.provenance:
            columns.append(TableColumn(PROV, "string", description=PROVENANCE))
        meta: dict[str, Any] = {"dagster/column_schema": TableSchema(columns=columns)}
        if stratum is not None:
            meta["pomo/stratum"] = stratum
        lifetime = program.catalog[relation].lifetime
        if lifetime is not None:
            meta["pomo/lifetime_ms"] = lifetime
        rules = self.get_rules(program, relation)
        if rules:
            meta["pomo/rules"] = MetadataValue.md(f"```\n{rules}\n```")
        warnings = [w.render(program.source) for w in program.warnings_about(relation)]
        if warnings:  # what `pomo check` says of these rules, where the asset is looked at
            meta["pomo/warnings"] = MetadataValue.md("```\n" + "\n".join(warnings) + "\n```")
        return meta


def _rules_of(program: Program, relation: str) -> list:
    return [
        r for r in program.corpus.rules if r.head.relation == relation and (r.body or r.is_fact)
    ]
