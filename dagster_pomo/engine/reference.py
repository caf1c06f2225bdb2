"""The reference evaluator: naive, whole-history, obviously correct, slow.

It is the oracle the Spark engine is tested against, so it favours being easy to check
against docs/semantics.md, Time over speed. For every epoch ``[a, b)`` it starts again from
scratch: all input versions known before ``b``, every stratum run to a fixpoint by
re-evaluating every rule on everything, keeping the derived versions with ``kt < b``.
``@next`` rules run on the state of the previous epoch and are stamped at its end. Nothing
here is incremental.

How a rule matches (``matches``, ``valid_matches``, ``unify``, ``negation_holds``) and what
its head makes of a match (``head_values``) are public: ``engine/explain.py`` replays a
derivation through them, so an explanation follows this reading of the semantics.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

from dagster_pomo.engine.budgets import DEFAULT as BUDGETS
from dagster_pomo.engine.budgets import BudgetExceeded, Budgets
from dagster_pomo.engine.cid import cid
from dagster_pomo.engine.lattices import fold, merge_of
from dagster_pomo.engine.versions import Version, union, value_order
from dagster_pomo.errors import PomoError
from dagster_pomo.lang import Program, ast
from dagster_pomo.lang.check import CLOCK, binding_of
from dagster_pomo.lang.interpret import Undefined, Value, evaluate, holds
from dagster_pomo.plan.schema import Schema
from dagster_pomo.timeline import NEVER, Epoch, iter_ticks, show_epoch


def expiry(t: int, lifetime: int | None) -> int:
    """When a version stamped ``t`` expires by its relation's lifetime: never past `NEVER`."""
    return NEVER if lifetime is None else min(NEVER, t + lifetime)


Env = dict[str, Value]
Key = tuple[int, tuple[Value, ...], int]  # a version's (t, args, kt): one version per key
Db = dict[str, dict[Key, Version]]


class EvaluationError(PomoError):
    """A rule produced a value its head relation cannot hold."""


def constant_values(rule: ast.Rule) -> Env:
    """The ``where`` definitions that read no event, evaluated (an undefined one is left out,
    as are those that read it). Worked out here, not taken from the plan layer, so that the
    differential tests compare two readings of the rules."""
    bound = {
        arg.name
        for atom in rule.positive
        for arg in (
            *(() if atom.relation == CLOCK else atom.args),
            *(x for ann in atom.annotations for x in ann.args),
        )
        if isinstance(arg, ast.Var)
    }
    env: Env = {}
    pending = [d for d in rule.defs if d.var.name not in bound]
    while True:
        ready = [d for d in pending if all(v.name in env for v in ast.expr_vars(d.expr))]
        if not ready:
            return env
        for d in ready:
            pending.remove(d)
            try:
                env[d.var.name] = evaluate(d.expr, env)
            except Undefined:
                continue


def clocks(program: Program) -> set[tuple[int, int]]:
    """Every ``(offset, period)`` the rules read ``clock`` with (periods above zero)."""
    found: set[tuple[int, int]] = set()
    for rule in program.corpus.rules:
        for atom in rule.positive:
            if atom.relation == CLOCK:
                env = constant_values(rule)
                offset, period = (int(evaluate(a, env)) for a in atom.args)
                if period > 0:
                    found.add((offset, period))
    return found


def same(a: Value, b: Value) -> bool:
    """Equality that keeps booleans, numbers and strings apart (``true != 1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    return a == b


@dataclass(frozen=True)
class Since:
    """The versions of a stratum's relations added or changed (a longer ``exp``) since a
    rule last ran in its fixpoint, per relation; every relation of the stratum is a key."""

    new: Mapping[str, Mapping[Key, Version]]

    @classmethod
    def made_from(cls, step: int, changes: Mapping[str, list[tuple[int, Key]]], db: Db) -> Since:
        """What ``changes`` (per relation, ``(step, key)`` in the order made) holds of
        ``step`` and later (a rule that ran at ``step`` did not see what it made), as the
        versions ``db`` holds now."""
        new: dict[str, dict[Key, Version]] = {}
        for name, made in changes.items():
            first = bisect.bisect_left(made, step, key=lambda c: c[0])
            table = db.get(name, {})
            new[name] = {key: table[key] for _, key in made[first:]}
        return cls(new)

    def reaches(self, rule: ast.Rule) -> bool:
        """Whether one of the rule's atoms reads a relation with a new version."""
        return any(self.new.get(a.relation) for a in rule.positive)


def _has_expressions(atom: ast.Atom) -> bool:
    """Whether one of the atom's arguments is an expression to work out (not a variable, a
    wildcard or a constant), compared only once the match is complete."""
    args = (*atom.args, *(a for ann in atom.annotations for a in ann.args))
    return not all(isinstance(a, ast.Var | ast.Wildcard | ast.Const) for a in args)


def _monotone(rule: ast.Rule) -> bool:
    """Whether each of the rule's matches gives what it gives whatever else matches: no
    aggregate, body aggregate or ``choose`` (which look at all matches at once)."""
    return not (rule.aggregates or rule.body_aggregates or rule.choices)


@dataclass(frozen=True)
class Match:
    env: Env
    rows: tuple[Version, ...]
    keys: tuple[tuple[object, ...], ...]  # matched events (relation, t, args, aggs)


class ReferenceEvaluator:
    def __init__(
        self, program: Program, schemas: Mapping[str, Schema], budgets: Budgets = BUDGETS
    ) -> None:
        self.program = program
        self.catalog = program.catalog
        self.schemas = schemas
        self.budgets = budgets
        # Per (relation, argument): the table it indexes, its size then, and the keys of its
        # versions by that argument's value (see `_candidates`).
        self._indexes: dict[tuple[str, int], tuple[dict, int, dict]] = {}

    # ------------------------------------------------------------------ driver

    def run(
        self, inputs: Mapping[str, list[Version]], epochs: list[Epoch], clock_start: int
    ) -> dict[str, list[Version]]:
        """Every derived version with ``kt`` below the end of the last epoch."""
        derived = {r.name for r in self.catalog if r.derived or r.inductive}
        out: dict[str, list[Version]] = {name: [] for name in derived}
        carried: dict[str, list[Version]] = {}  # versions made by @next rules
        previous_db: Db | None = None
        known = sorted(row.kt for rows in inputs.values() for row in rows)
        quiet = self._quiet()
        for epoch in epochs:
            if quiet and not _any_in(known, epoch):
                continue
            if previous_db is not None and epoch.previous is not None:
                for name, rows in self._next(previous_db, epoch.previous).items():
                    carried.setdefault(name, []).extend(rows)
            db = self._base(inputs, carried, clock_start, epoch.end)
            for stratum in self.program.strata:
                if not stratum.inductive:
                    try:
                        self._fixpoint(stratum.rules, db, epoch.end)
                    except BudgetExceeded as exc:
                        raise exc.located(self.program.source, show_epoch(epoch)) from None
            for name in derived:
                out[name].extend(
                    r for r in db.get(name, {}).values() if epoch.lower <= r.kt < epoch.end
                )
            previous_db = db
        return out

    def _quiet(self) -> bool:
        """Whether an epoch without inputs derives nothing: the corpus has no clock, no
        ``@next`` and no head stamped with ``@time`` (each of which can make an event known
        in an epoch without an input). A derived event is known at the latest time among
        those it matched, so every one then needs an input known in its epoch, and an
        epoch without one is skipped: it costs nothing."""
        rules = self.program.corpus.rules
        if any(r.is_inductive or (r.body and r.head.time is not None) for r in rules):
            return False
        if any(r.body_aggregates or r.aggregates for r in rules):
            return False  # an event an aggregate summarises expires: a new value
        return not clocks(self.program)

    def _base(
        self,
        inputs: Mapping[str, list[Version]],
        carried: Mapping[str, list[Version]],
        clock_start: int,
        end: int,
    ) -> Db:
        db: Db = {}
        for source in (inputs, carried):
            for name, rows in source.items():
                for row in rows:
                    if row.kt < end:
                        _add(db, name, row, aggregating=False)
        for offset, period in clocks(self.program):
            for t in iter_ticks(offset, period, clock_start, end):
                _add(db, CLOCK, Version(t, (offset, period), t, t + period), aggregating=False)
        return db

    def _fixpoint(self, rules: tuple[ast.Rule, ...], db: Db, end: int) -> None:
        """The rules to their fixpoint: each round applies every rule to what it matches.
        `BudgetExceeded` past `Budgets.rounds` rounds, or `Budgets.versions` new versions.

        A rule's first application matches everything. After it, a rule that is monotone
        in its matches (no aggregate, body aggregate or ``choose``, which look at all of
        them at once) matches only combinations holding a version of the stratum's own
        relations added or changed since it last ran (`Since`): the others gave what they
        give already. The fixpoint is the same; a chain of small recursive strata no longer
        pays each round for every earlier one."""
        heads = {r.head.relation for r in rules}
        before = sum(len(db.get(n, {})) for n in heads)
        derived = [r for r in rules if r.body]  # facts are already among the inputs
        changes: dict[str, list[tuple[int, Key]]] = {n: [] for n in heads}
        ran: dict[int, int] = {}  # rule's position -> the step it last ran at
        step, rounds, changed = 0, 0, True
        while changed:
            changed = False
            rounds += 1
            if rounds > self.budgets.rounds and derived:
                own = [r for r in derived if any(a.relation in heads for a in r.positive)]
                raise self._exceeded("rounds", None, (own or derived)[0])
            for i, rule in enumerate(derived):
                since = None
                if i in ran and _monotone(rule):
                    since = Since.made_from(ran[i], changes, db)
                    if not since.reaches(rule):
                        continue  # nothing it reads changed: it gives what it gave
                step += 1
                ran[i] = step
                name = rule.head.relation
                aggregating = bool(rule.aggregates)
                for row in self._derive(rule, db, since):
                    if row.kt < end and _add(db, name, row, aggregating):
                        changed = True
                        changes[name].append((step, (row.t, row.args, row.kt)))
                made = sum(len(db.get(n, {})) for n in heads) - before
                if made > self.budgets.versions:
                    raise self._exceeded("versions", made, rule)

    def _exceeded(self, budget: str, found: int | None, rule: ast.Rule) -> BudgetExceeded:
        limit = getattr(self.budgets, budget)
        return BudgetExceeded(budget, limit, found, rule.head.relation, rule.span)

    # ------------------------------------------------------------------ matching

    def matches(
        self,
        rule: ast.Rule,
        db: Db,
        alive: tuple[int, int] | None = None,
        since: Since | None = None,
    ) -> Iterator[Match]:
        """Combinations of versions for the positive atoms, with ``where`` and guards applied.

        ``alive=(start, end)`` keeps only versions alive at some instant of that window
        (``@next`` rules); otherwise liveness is checked per match at its time. ``since``:
        only the combinations holding at least one of its versions, each once.
        """
        atoms = rule.positive
        order = binding_of(rule).def_order
        product = self._product(rule, db)
        if product > self.budgets.combinations:
            raise self._exceeded("combinations", product, rule)

        def walk(i: int, env: Env, rows: tuple[Version, ...], fresh: int) -> Iterator[Match]:
            if i == len(atoms):
                for summarised, pieces in self._summarise(rule.body_aggregates, env, rows, db):
                    yield from complete(summarised, rows, pieces)
                return
            atom = atoms[i]
            for row in self._rows_at(i, fresh, atom, env, db, since):
                if alive is not None and not (row.kt < alive[1] and row.exp > alive[0]):
                    continue
                env2 = dict(env)
                if self.unify(atom, row, env2, final=False):
                    yield from walk(i + 1, env2, (*rows, row), fresh)

        def complete(
            env: Env, rows: tuple[Version, ...], pieces: tuple[Version, ...]
        ) -> Iterator[Match]:
            full = dict(env)
            try:
                for d in order:
                    full[d.var.name] = evaluate(d.expr, full)
                for atom, row in zip(atoms, rows, strict=True):
                    # the first pass compared all but expressions: only those are left
                    if _has_expressions(atom) and not self.unify(atom, row, full, final=True):
                        return
            except Undefined:
                return
            if all(holds(g, full) for g in rule.guards):
                keys = tuple(
                    (a.relation, r.t, r.args, r.aggs) for a, r in zip(atoms, rows, strict=True)
                )
                yield Match(full, rows + pieces, keys)

        constants = constant_values(rule)
        if since is None:
            yield from walk(0, constants, (), -1)
            return
        # Each combination once: the first of its atoms holding a new version is `fresh`,
        # the atoms of the stratum's relations before it hold old ones.
        for fresh, atom in enumerate(atoms):
            if since.new.get(atom.relation):
                yield from walk(0, constants, (), fresh)

    def _rows_at(
        self, i: int, fresh: int, atom: ast.Atom, env: Env, db: Db, since: Since | None
    ) -> Iterable[Version]:
        """The versions atom ``i`` may match in a walk whose first new version is at atom
        ``fresh`` (-1: every version everywhere): there the new versions, before it the
        old ones of the stratum's relations."""
        if since is None or fresh < 0 or (i > fresh or atom.relation not in since.new):
            return self._candidates(atom, env, db)
        new = since.new[atom.relation]
        if i == fresh:
            return new.values()
        return (r for r in self._candidates(atom, env, db) if (r.t, r.args, r.kt) not in new)

    def _candidates(self, atom: ast.Atom, env: Env, db: Db) -> Iterable[Version]:
        """The versions of ``atom``'s relation that may unify with it under ``env``: those
        holding the value of its first argument already bound (a variable of ``env``), by an
        index of the relation on that argument, else all. Every version that unifies is
        among them (values equal as `same` says are equal keys); `unify` decides."""
        table = db.get(atom.relation, {})
        at = next(
            (j for j, a in enumerate(atom.args) if isinstance(a, ast.Var) and a.name in env), None
        )
        if at is None or len(table) < 8:
            return table.values()
        cached = self._indexes.get((atom.relation, at))
        if cached is None or cached[0] is not table or cached[1] != len(table):
            index: dict[Value, list[tuple[int, tuple[Value, ...], int]]] = {}
            for key, row in table.items():
                index.setdefault(row.args[at], []).append(key)
            cached = (table, len(table), index)
            self._indexes[(atom.relation, at)] = cached
        value = env[atom.args[at].name]  # type: ignore[union-attr]
        return [table[key] for key in cached[2].get(value, ())]

    def _product(self, rule: ast.Rule, db: Db) -> int:
        """The combinations the rule's positive atoms make as a product of groups that share
        no variable (`Budgets.combinations`): each group's matches, multiplied; 0 for a
        rule whose atoms all hang together."""
        groups: list[tuple[set[str], list[ast.Atom]]] = []
        for atom in rule.positive:
            args = (*atom.args, *(x for ann in atom.annotations for x in ann.args))
            names = {v.name for a in args for v in ast.expr_vars(a)}
            joined = [g for g in groups if g[0] & names]
            for g in joined:
                groups.remove(g)
            groups.append(
                (names.union(*(g[0] for g in joined)), [*(a for g in joined for a in g[1]), atom])
            )
        if len(groups) < 2:
            return 0
        total = 1
        for _, atoms in groups:
            total *= self._count(atoms, {}, db)
        return total

    def _count(self, atoms: list[ast.Atom], env: Env, db: Db) -> int:
        """How many combinations of versions agree on ``atoms``' shared variables."""
        if not atoms:
            return 1
        total = 0
        for row in db.get(atoms[0].relation, {}).values():
            bound = dict(env)
            if self.unify(atoms[0], row, bound, final=False):
                total += self._count(atoms[1:], bound, db)
        return total

    def _summarise(
        self, literals: tuple[ast.BodyLiteral, ...], env: Env, rows: tuple[Version, ...], db: Db
    ) -> Iterator[tuple[Env, tuple[Version, ...]]]:
        """The body aggregates of a match of the positive atoms (``rows``): at the match's
        time and whenever an event one of them summarises arrives or expires while the match
        lives, each bound to its value then, with that piece's life as one more row
        (``t = kt`` = its start)."""
        if not literals:
            yield env, ()
            return
        tau = max((r.kt for r in rows), default=None)
        exp = min((r.exp for r in rows), default=NEVER)
        if tau is not None and exp <= tau:
            return
        summarised = [self._summarised(lit, env, db) for lit in literals]
        times = {x for events in summarised for _, _, kt, e in events for x in (kt, e)}
        times = {x for x in times if (tau is None or tau < x) and x < exp}
        for at in sorted(times | ({tau} if tau is not None else set())):
            bound, until = dict(env), exp
            for lit, events in zip(literals, summarised, strict=True):
                agg = lit.aggregation
                assert agg is not None
                covered: dict[tuple[object, ...], tuple[Value, int]] = {}
                for key, value, kt, e in events:
                    if kt <= at < e:
                        covered[key] = (value, max(e, covered[key][1]) if key in covered else e)
                if covered:
                    try:
                        result = _aggregate(agg.function, [v for v, _ in covered.values()])
                    except Undefined:
                        break
                    until = min(until, *(e for _, e in covered.values()))
                elif agg.function in ("count", "sum"):
                    result = 0
                else:
                    break  # no event, no minimum: the search fails
                bound[agg.var.name] = result
            else:
                yield bound, (Version(at, (), at, until),)

    def _summarised(
        self, lit: ast.BodyLiteral, env: Env, db: Db
    ) -> list[tuple[tuple[object, ...], Value, int, int]]:
        """The versions of a body aggregate's atom that agree with ``env``: (event, value,
        kt, exp), those whose value is undefined left out."""
        agg = lit.aggregation
        assert agg is not None
        events = []
        for row in db.get(lit.atom.relation, {}).values():
            local = dict(env)
            try:
                if not self.unify(lit.atom, row, local, final=False):
                    continue
                if not self.unify(lit.atom, row, local, final=True):
                    continue
                value = 1 if agg.arg is None else evaluate(agg.arg, local)
            except Undefined:
                continue
            events.append(((row.t, row.args, row.aggs), value, row.kt, row.exp))
        return events

    def unify(self, atom: ast.Atom, row: Version, env: Env, final: bool) -> bool:
        """Bind or compare ``atom``'s arguments with ``row``. Expression arguments are only
        compared when ``final`` (once every variable and definition is known)."""
        pairs: list[tuple[ast.Expr, Value]] = list(zip(atom.args, row.args, strict=True))
        rel = self.catalog[atom.relation]
        for ann in atom.annotations:
            if ann.name == "time":
                pairs.append((ann.args[0], row.t))
            elif ann.name == "cid":
                pairs.append((ann.args[0], cid(atom.relation, row.args, row.t)))
            else:
                pairs.append((ann.args[0], row.aggs[rel.aggregate_names.index(ann.name)]))
        for expr, value in pairs:
            if isinstance(expr, ast.Wildcard):
                continue
            if isinstance(expr, ast.Var):
                if expr.name in env:
                    if not same(env[expr.name], value):
                        return False
                else:
                    env[expr.name] = value
            elif isinstance(expr, ast.Const) or final:
                try:
                    if not same(evaluate(expr, env), value):
                        return False
                except KeyError:
                    if final:
                        raise Undefined("unbound variable") from None
        return True

    def negation_holds(self, atom: ast.Atom, env: Env, db: Db, alive: tuple[int, int]) -> bool:
        """No version of ``atom`` agreeing with ``env`` is alive in ``[alive[0], alive[1])``
        (a single instant ``tau`` is ``(tau, tau + 1)``)."""
        for row in db.get(atom.relation, {}).values():
            if row.kt < alive[1] and row.exp > alive[0]:
                try:
                    if self.unify(atom, row, dict(env), final=True):
                        return False
                except Undefined:
                    continue
        return True

    # ------------------------------------------------------------------ deriving

    def _derive(self, rule: ast.Rule, db: Db, since: Since | None = None) -> list[Version]:
        if rule.aggregates:
            return self._aggregate(rule, db)
        out = []
        for match, tau, exp in self.valid_matches(rule, db, since):
            row = self._head(rule, match, tau, exp)
            if row is not None:
                out.append(row)
        return out

    def valid_matches(
        self, rule: ast.Rule, db: Db, since: Since | None = None
    ) -> Iterator[tuple[Match, int, int]]:
        """Matches whose versions are all alive at the match time ``tau`` (the latest ``kt``)
        and whose negated atoms hold at ``tau``; with the match's expiry. Each ``choose``
        keeps, per keys, the matches with the values of the first one (the least values at
        the earliest ``tau``): a functional dependency across time."""
        found = []
        for match in self.matches(rule, db, since=since):
            tau = max(r.kt for r in match.rows)
            if not all(r.alive_at(tau) for r in match.rows):
                continue
            if all(self.negation_holds(a, match.env, db, (tau, tau + 1)) for a in rule.negative):
                found.append((match, tau, min(r.exp for r in match.rows)))
        for choice in rule.choices:
            # A dependency across time: per keys, the values of the first match (the least
            # values among those at the earliest time), and only matches with those.
            first: dict[tuple[object, ...], tuple[int, tuple[object, ...]]] = {}
            for match, tau, _ in found:
                key = tuple(match.env[v.name] for v in choice.keys)
                value = tuple(value_order(match.env[v.name]) for v in choice.values)
                first[key] = min(first.get(key, (tau, value)), (tau, value))
            found = [
                (m, tau, exp)
                for m, tau, exp in found
                if first[tuple(m.env[v.name] for v in choice.keys)][1]
                == tuple(value_order(m.env[v.name]) for v in choice.values)
            ]
        yield from found

    def head_values(self, rule: ast.Rule, env: Env, tau: int) -> tuple[tuple[Value, ...], int]:
        """The head's arguments for a match's bindings ``env`` at ``tau``, and its time."""
        schema = self.schemas[rule.head.relation]
        args = tuple(evaluate(a, env) for a in rule.head.args)
        args = tuple(_fit(v, typ, rule) for v, typ in zip(args, schema.types, strict=True))
        for arg, value in zip(rule.head.args, args, strict=True):
            if isinstance(value, str) and len(value) > self.budgets.text and _computed(arg, rule):
                raise self._exceeded("text", len(value), rule)
        time = rule.head.time
        if time is None:
            return args, tau
        t = evaluate(time, env)
        if isinstance(t, float) and t.is_integer():
            t = int(t)
        if not isinstance(t, int) or isinstance(t, bool):
            raise Undefined("a time must be an integer")
        return args, t

    def _sources(self, rule: ast.Rule, rows: tuple[Version, ...]) -> tuple[str, ...]:
        """A match's provenance, for a head that carries it: each positive atom's event's
        own (its content ID, for an event no rule derives; a clock tick none), united."""
        if not self.catalog[rule.head.relation].provenance:
            return ()
        found: set[str] = set()
        for atom, row in zip(rule.positive, rows, strict=False):  # body aggregates: none
            if atom.relation == CLOCK:
                continue
            if self.catalog[atom.relation].provenance:
                found.update(row.prov)
            else:
                found.add(cid(atom.relation, row.args, row.t))
        return tuple(sorted(found))

    def _head(self, rule: ast.Rule, match: Match, tau: int, exp: int) -> Version | None:
        try:
            args, t = self.head_values(rule, match.env, tau)
        except Undefined:
            return None
        lifetime = self.catalog[rule.head.relation].lifetime
        exp = min(exp, expiry(t, lifetime))
        return Version(t, args, max(tau, t), exp, (), tau, self._sources(rule, match.rows))

    def _aggregate(self, rule: ast.Rule, db: Db) -> list[Version]:
        """Per group and per distinct match time ``tau`` (and, without an explicit ``@time``,
        each time a match expires): the matches made by then that are still alive then,
        each distinct combination of events counted once."""
        groups: dict[tuple[tuple[Value, ...], int | None], list[tuple[int, tuple, tuple, int]]] = {}
        for match, tau, exp in self.valid_matches(rule, db):
            try:
                args, t = self.head_values(rule, match.env, tau)
                values = tuple(
                    evaluate(a.value, match.env) if a.value is not None else 1
                    for a in rule.aggregates
                )
            except Undefined:
                continue
            explicit = t if rule.head.time is not None else None
            prov = self._sources(rule, match.rows)
            groups.setdefault((args, explicit), []).append((tau, match.keys, values, exp, prov))
        lifetime = self.catalog[rule.head.relation].lifetime
        out = []
        for (args, explicit), items in groups.items():
            times = {item[0] for item in items}
            if explicit is None:  # a sliding window changes when a match expires too
                times |= {item[3] for item in items if item[3] < NEVER}
            for tau in sorted(times):
                covered: dict[tuple, tuple[tuple, int]] = {}
                for tau2, keys, values, exp, _ in items:
                    if tau2 <= tau < exp:
                        old = covered.get(keys)
                        covered[keys] = (values, max(exp, old[1]) if old else exp)
                if not covered:
                    continue  # every match has expired: the group has no event until the next
                # A combination of events rests on every one of its versions made by then.
                sources = union(
                    *(p for tau2, keys, _, _, p in items if tau2 <= tau and keys in covered)
                )
                try:
                    aggs = tuple(
                        _aggregate(a.name, [v[i] for v, _ in covered.values()], a.lattice)
                        for i, a in enumerate(rule.aggregates)
                    )
                except Undefined:
                    continue
                t = tau if explicit is None else explicit
                exp = min(min(e for _, e in covered.values()), expiry(t, lifetime))
                out.append(Version(t, args, max(tau, t), exp, aggs, tau, sources))
        return out

    def _next(self, db: Db, epoch: Epoch) -> dict[str, list[Version]]:
        """``@next`` rules over the versions alive at some instant of ``epoch``; stamped at its
        end and alive for one more epoch of the same length. ``@async`` rules: their matches
        with ``tau`` in ``epoch``, stamped at its end, alive for their lifetime."""
        out: dict[str, list[Version]] = {}
        b, length = epoch.end, epoch.end - epoch.start
        window = (epoch.lower, epoch.end)
        for stratum in self.program.strata:
            if not stratum.inductive:
                continue
            for rule in stratum.rules:
                lifetime = self.catalog[rule.head.relation].lifetime
                if rule.is_async:  # a message per match of the epoch, delivered at its end
                    for match, tau, _ in self.valid_matches(rule, db):
                        if not epoch.lower <= tau < b:
                            continue
                        try:
                            args, _ = self.head_values(rule, match.env, b)
                        except Undefined:
                            continue
                        prov = self._sources(rule, match.rows)
                        row = Version(b, args, b, expiry(b, lifetime), (), b, prov)
                        out.setdefault(rule.head.relation, []).append(row)
                    continue
                for match in self.matches(rule, db, alive=window):
                    if not all(
                        self.negation_holds(a, match.env, db, window) for a in rule.negative
                    ):
                        continue
                    try:
                        args, _ = self.head_values(rule, match.env, b)
                    except Undefined:
                        continue
                    exp = min(b + length, expiry(b, lifetime))
                    row = Version(b, args, b, exp, (), b, self._sources(rule, match.rows))
                    out.setdefault(rule.head.relation, []).append(row)
        return out


def _computed(arg: ast.Expr, rule: ast.Rule) -> bool:
    """Whether a head argument is a value the rule computes (not an event's, nor a constant)."""
    if isinstance(arg, ast.Var):
        return any(d.var.name == arg.name for d in rule.defs)
    return not isinstance(arg, ast.Const)


def _fit(value: Value, typ: str, rule: ast.Rule) -> Value:
    """A head value as its column's type (integers widen to floats)."""
    if typ == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    typ = ast.stored_type(typ)
    ok = {"int": int, "float": float, "str": str, "bool": bool}[typ]
    if isinstance(value, ok) and (typ == "bool" or not isinstance(value, bool)):
        return value
    raise EvaluationError(
        f"line {rule.span.line}: `{rule.head.relation}` has a {typ} column, "
        f"but the rule derives {value!r}"
    )


def _aggregate(name: str, values: list[Value], lattice: str | None = None) -> Value:
    if name == "count":
        return len(values)
    if lattice is not None:  # the registered merge (order and repeats do not matter)
        return fold(merge_of(lattice), values)  # type: ignore[return-value]
    if name == "collect":  # a set: its distinct values in the one order of values
        return tuple(sorted(set(values), key=value_order))  # type: ignore[return-value]
    if any(isinstance(v, bool) for v in values):
        raise Undefined("cannot aggregate booleans")
    if name == "min":
        return min(values)  # type: ignore[type-var]
    if name == "max":
        return max(values)  # type: ignore[type-var]
    if any(isinstance(v, str) for v in values):
        raise Undefined("cannot sum strings")
    total = sum(values)  # type: ignore[arg-type]
    return total if name == "sum" else total / len(values)


def _add(db: Db, name: str, row: Version, aggregating: bool) -> bool:
    """Add a version; one per ``(t, args, kt)``: the largest ``exp`` (or, for an aggregate,
    the latest ``tau``). True if the database changed."""
    table = db.setdefault(name, {})
    key = (row.t, row.args, row.kt)
    seen = table.get(key)
    if seen is None:
        table[key] = row
        return True
    prov = union(seen.prov, row.prov)  # provenance only grows
    if aggregating:
        if row.tau > seen.tau or (row.tau == seen.tau and row != seen):
            table[key] = replace(row, prov=prov)
            return table[key] != seen
        if prov != seen.prov:
            table[key] = replace(seen, prov=prov)
            return True
        return False
    if row.exp > seen.exp or prov != seen.prov:
        exp = max(row.exp, seen.exp)
        table[key] = Version(row.t, row.args, row.kt, exp, (), min(row.tau, seen.tau), prov)
        return True
    return False


def _any_in(known: list[int], epoch: Epoch) -> bool:
    """Whether a time of the sorted ``known`` lies in ``[epoch.lower, epoch.end)``."""
    first = bisect.bisect_left(known, epoch.lower)
    return first < len(known) and known[first] < epoch.end
