"""Guards that keep two variables within a constant distance of each other.

``seen < tick ^ seen >= tick - period`` (with ``period`` a constant) says that
``seen - tick`` lies in ``[-period, 0]``. Two atoms that share no variable would
otherwise be joined by pairing everything with everything and filtering; knowing
the band, the engine joins them on buckets of the band's width instead, and the
guards still decide. Only integer sums and differences of variables and constants
are understood; anything else is no band.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dagster_pomo.plan.exprs import Arith, Arithmetic, Cmp, Compare, Expr, Literal, Negate, Var

Linear = tuple[dict[str, int], int]  # coefficient per variable, and a constant


@dataclass(frozen=True)
class Band:
    """Every match the guards keep has ``left - right`` in ``[low, high]``."""

    left: str
    right: str
    low: int
    high: int

    def flipped(self) -> Band:
        return Band(self.right, self.left, -self.high, -self.low)

    def buckets(self) -> tuple[int, int, int]:
        """``(width, first, last)``: for ``left - right`` in the band, the bucket
        ``floor(left / width)`` is ``floor(right / width)`` plus an offset in
        ``[first, last]``. No sum of a value and a constant is formed, so none overflows."""
        width = max(self.high - self.low, 1)
        return width, self.low // width, self.high // width + 1


def _linear(expr: Expr, constants: Mapping[str, object]) -> Linear | None:
    if isinstance(expr, Literal):
        ok = isinstance(expr.value, int) and not isinstance(expr.value, bool)
        return ({}, int(expr.value)) if ok else None
    if isinstance(expr, Var):
        value = constants.get(expr.name)
        if value is None:
            return {expr.name: 1}, 0
        ok = isinstance(value, int) and not isinstance(value, bool)
        return ({}, value) if ok else None  # type: ignore[return-value]
    if isinstance(expr, Negate):
        inner = _linear(expr.operand, constants)
        return None if inner is None else ({v: -c for v, c in inner[0].items()}, -inner[1])
    if isinstance(expr, Arithmetic) and expr.op in (Arith.ADD, Arith.SUB):
        return _sum(expr.left, expr.right, 1 if expr.op is Arith.ADD else -1, constants)
    return None


def _sum(left: Expr, right: Expr, sign: int, constants: Mapping[str, object]) -> Linear | None:
    """``left + sign * right``, if both are linear."""
    a, b = _linear(left, constants), _linear(right, constants)
    if a is None or b is None:
        return None
    coeffs = dict(a[0])
    for v, c in b[0].items():
        coeffs[v] = coeffs.get(v, 0) + sign * c
    return {v: c for v, c in coeffs.items() if c}, a[1] + sign * b[1]


_BOUNDS = (Cmp.LT, Cmp.LE, Cmp.GT, Cmp.GE, Cmp.EQ)


def _bound(guard: Expr, constants: Mapping[str, object]) -> tuple[Band, bool, bool] | None:
    """``(band, has_low, has_high)`` for one comparison of two variables, else None."""
    if not (isinstance(guard, Compare) and guard.op in _BOUNDS):
        return None
    difference = _sum(guard.left, guard.right, -1, constants)
    if difference is None or sorted(difference[0].values()) != [-1, 1]:
        return None
    coeffs, constant = difference
    x = next(v for v, c in coeffs.items() if c == 1)
    y = next(v for v, c in coeffs.items() if c == -1)
    bound = -constant  # the guard says: x - y + constant `op` 0, so x - y `op` bound
    upper, lower = guard.op in (Cmp.LT, Cmp.LE, Cmp.EQ), guard.op in (Cmp.GT, Cmp.GE, Cmp.EQ)
    return Band(x, y, bound, bound), lower, upper


def bands(guards: Sequence[Expr], constants: Mapping[str, object]) -> list[Band]:
    """The bands the guards put on pairs of variables (both ends known), each pair once,
    named in the order of its first guard. Strict comparisons give the closed band around
    them: the buckets only have to hold every match the guards keep."""
    lows: dict[tuple[str, str], int] = {}
    highs: dict[tuple[str, str], int] = {}
    order: list[tuple[str, str]] = []
    for guard in guards:
        found = _bound(guard, constants)
        if found is None:
            continue
        band, has_low, has_high = found
        key = (band.left, band.right)
        if (band.right, band.left) in order:
            key = (band.right, band.left)
            band, has_low, has_high = band.flipped(), has_high, has_low
        elif key not in order:
            order.append(key)
        if has_low:
            lows[key] = max(lows.get(key, band.low), band.low)
        if has_high:
            highs[key] = min(highs.get(key, band.high), band.high)
    return [Band(*k, lows[k], highs[k]) for k in order if k in lows and k in highs]


def no_later(
    earlier: str, later: str, guards: Sequence[Expr], constants: Mapping[str, object]
) -> bool:
    """Whether one of the guards keeps ``earlier <= later``."""
    for guard in guards:
        found = _bound(guard, constants)
        if found is None:
            continue
        band, has_low, has_high = found
        if (band.left, band.right) == (earlier, later) and has_high and band.high <= 0:
            return True
        if (band.left, band.right) == (later, earlier) and has_low and band.low >= 0:
            return True
    return False
