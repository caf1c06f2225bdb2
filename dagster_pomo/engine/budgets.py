"""Budgets: how much one epoch may ask of the engine before the run stops and says why.

A corpus can ask for more than any machine has (``n(x + 1) := n(x)`` counts for ever,
``s(concat(x, x)) := s(x)`` doubles a text each round, five unrelated atoms over a few
dozen events make millions of combinations). Each budget bounds one way of growing, per
epoch, on every engine; a run that hits one stops with a located error naming the rule,
the budget and how to raise it, and stores nothing of that epoch (see
docs/operations.md, "Budgets"). The defaults leave every example and benchmark far
below them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from dagster_pomo.errors import PomoError, UsageError
from dagster_pomo.lang.errors import Diagnostic
from dagster_pomo.lang.source import Source, Span

if TYPE_CHECKING:
    from dagster_pomo.plan.corpus import StratumPlan
    from dagster_pomo.plan.rules import RulePlan


@dataclass(frozen=True)
class Budgets:
    # Rounds one recursive stratum may run in one epoch.
    rounds: int = 10_000
    # Versions one stratum may derive in one epoch.
    versions: int = 50_000_000
    # Characters of one text value a rule computes for its head.
    text: int = 1_000_000
    # Combinations of events a product of a rule's atoms that share no variable may make
    # (counted before they are made; joins on a shared variable are bounded by their data).
    combinations: int = 10_000_000

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def with_settings(self, settings: Mapping[str, int] | Iterable[str]) -> Budgets:
        """These budgets with some changed: a mapping of name to limit, or ``NAME=N`` texts
        (as ``pomo run --budget`` takes them). Raises `UsageError` for an unknown name or a
        limit that is not a whole number above zero."""
        pairs = settings.items() if isinstance(settings, Mapping) else map(_pair, settings)
        changed: dict[str, int] = {}
        for name, limit in pairs:
            if name not in self.names():
                raise UsageError(
                    f"no budget called {name!r}: the budgets are {', '.join(self.names())}"
                )
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise UsageError(f"budget {name} must be a whole number above 0, not {limit!r}")
            changed[name] = limit
        return replace(self, **changed)


def _pair(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    digits = value.strip().replace("_", "").replace(",", "")
    if not sep or not digits.isdigit():
        raise UsageError(f"a budget is NAME=N (e.g. rounds=500000), not {text!r}")
    return name.strip(), int(digits)


DEFAULT = Budgets()


class BudgetExceeded(PomoError):
    """An epoch asked for more than a budget allows. Raised by an engine with what it knows
    (the budget, its limit, what was found, the rule or relation); the driver adds where
    (`located`: the corpus's source and the epoch) before it reaches the user."""

    def __init__(
        self,
        budget: str,
        limit: int,
        found: int | None,
        relation: str,
        span: Span | None = None,
        source: Source | None = None,
        epoch: str | None = None,
    ) -> None:
        self.budget, self.limit, self.found = budget, limit, found
        self.relation, self.span, self.source, self.epoch = relation, span, source, epoch
        super().__init__(self.render())

    def located(self, source: Source, epoch: str) -> BudgetExceeded:
        """The same error, said at the rule in ``source``, in ``epoch``."""
        return BudgetExceeded(
            self.budget, self.limit, self.found, self.relation, self.span, source, epoch
        )

    def render(self) -> str:
        found = f"{self.found:,}" if self.found is not None else f"more than {self.limit:,}"
        said = {
            "rounds": f"the recursion through `{self.relation}` did not end within "
            f"{self.limit:,} rounds",
            "versions": f"the rules of `{self.relation}`'s stratum derived {found} versions "
            f"(the budget is {self.limit:,})",
            "text": f"this rule for `{self.relation}` computed a text of {found} characters "
            f"(the budget is {self.limit:,})",
            "combinations": f"this rule for `{self.relation}` joins atoms that share no "
            f"variable into {found} combinations of events (the budget is {self.limit:,})",
        }[self.budget]
        message = f"budget `{self.budget}` exceeded: {said}"
        if self.epoch:
            message += f", in the epoch {self.epoch}; nothing of that epoch was stored"
        hint = (
            f"if the corpus means it, raise the budget (`pomo run --budget "
            f"{self.budget}=N`, or `budgets` of the Dagster resource or Component); "
            "if not, bound the rule (a guard, a key it joins on)"
        )
        if self.source is None or self.span is None:
            return f"{message}\n  hint: {hint}"
        return Diagnostic(message, self.span, hint).render(self.source)


def over(
    budget: str,
    budgets: Budgets,
    found: int | None,
    stratum: StratumPlan | None,
    relation: str | None = None,
    rule: RulePlan | None = None,
) -> BudgetExceeded:
    """The error for ``budget`` passed in ``stratum``: at ``rule``, or at the rule that
    makes ``relation`` (any of the stratum's) grow."""
    if rule is None and stratum is not None:
        rule = stratum.cause(relation)
    name = rule.relation if rule is not None else (relation or "?")
    span = rule.span if rule is not None else None
    return BudgetExceeded(budget, getattr(budgets, budget), found, name, span)
