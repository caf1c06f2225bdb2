"""Which strata materialize together: the asset graph must stay acyclic."""

from __future__ import annotations

from dagster_pomo.lang import compile_corpus, load_program
from dagster_pomo.plan.units import units
from tests.conftest import RULES

FEEDBACK = """
.decl tick(u: str) lifetime 1ms;
.decl count(u: str, n: int);
.decl shown(u: str, n: int);
.decl report(u: str, n: int);
count(u, 1) @next := tick(u) ^ !shown(u, _);
count(u, n + 1) @next := shown(u, n) ^ tick(u);
shown(u, n) := count(u, n);
report(u, n) := shown(u, n) if n > 1;
"""


def _graph_is_acyclic(found) -> bool:
    owner = {r: u.name for u in found for r in u.relations}
    seen: list[str] = []
    for unit in found:  # upstream first: everything a unit reads is owned by an earlier one
        for name in unit.same_epoch | unit.previous_epoch:
            if name in owner and owner[name] not in seen:
                return False
        seen.append(unit.name)
    return True


def test_next_rules_that_feed_back_merge_their_strata_into_one_unit() -> None:
    found = units(compile_corpus(FEEDBACK, "feedback.pomo"))
    names = [u.name for u in found]
    assert names == ["shown_and_count", "report"], names
    merged = found[0]
    assert set(merged.relations) == {"count", "shown"}
    assert merged.previous_epoch == {"tick"}
    assert found[1].same_epoch == {"shown"}
    assert _graph_is_acyclic(found)


def test_every_example_corpus_gives_an_acyclic_graph_with_every_relation_once() -> None:
    for path in sorted(RULES.glob("*.pomo")):
        program = load_program(path)
        found = units(program)
        assert _graph_is_acyclic(found), path.name
        owned = [r for u in found for r in u.relations]
        derived = [r.name for r in program.catalog if r.derived or r.inductive]
        assert sorted(owned) == sorted(derived), path.name


def test_login_streaks_carries_its_next_relations_in_one_unit_of_their_own() -> None:
    found = units(load_program(RULES / "login_streaks.pomo"))
    carrier = next(u for u in found if u.carries)
    assert not carrier.strata
    assert set(carrier.carries) == {"login_days", "streak"}
    assert carrier.previous_epoch == {"login"}
