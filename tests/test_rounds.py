"""Which recursive strata run their later rounds in tasks, and the rounds themselves on plain
frames: the fixpoint, the versions' lifetimes, a task's limit, and keys that hash alike."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dagster_pomo.engine.local import linear_fixpoint
from dagster_pomo.lang import compile_corpus
from dagster_pomo.plan.corpus import compile_plan
from dagster_pomo.plan.schema import infer_schemas

DECLS = (
    ".decl edge(a: int, b: int);\n.decl name(a: int, s: str);\n.decl path(a: int, b: int);\n"
    ".decl blocked(n: int) lifetime 5;\n.decl weight(a: int, w: float);\n"
)
NEVER = 1 << 62


def _plan(rules: str):
    """The linear plan `compile_plan` gives the corpus's recursive stratum, if any."""
    program = compile_corpus(DECLS + rules, "p.pomo")
    plan = compile_plan(program, infer_schemas(program, {}))
    return next(s for s in plan.strata if s.recursive).linear


@pytest.mark.parametrize(
    "rules",
    [
        "path(a, b) := edge(a, b);\npath(a, c) := path(a, b) ^ edge(b, c);",
        "path(a, b) := edge(a, b) if a < b;\npath(a, c) := edge(a, b) ^ path(b, c) ^ edge(c, _);",
        "path(a, b) := edge(a, b);\npath(x, y) := edge(p, x) ^ path(p, q) ^ edge(q, y);",
        # Comparisons of variables and constants of one type, negated lower relations.
        "path(a, b) := edge(a, b);\npath(a, c) := path(a, b) ^ edge(b, c) if a != c ^ c < 90;",
        "path(a, b) := edge(a, b);\npath(a, c) := path(a, b) ^ edge(b, c) ^ !blocked(c);",
        "path(a, b) := edge(a, b);\npath(a, c) := path(a, b) ^ name(c, s) ^ edge(b, c) "
        'if s != "x";',
    ],
)
def test_linear_recursions_of_variables_run_in_tasks(rules: str) -> None:
    plan = _plan(rules)
    assert plan is not None and plan.relation == "path" and len(plan.rules) == 1


@pytest.mark.parametrize(
    "rules",
    [
        # Arithmetic, floats (whose NaN Spark orders), mixed types, an explicit time or an
        # expression argument need Spark's expressions.
        "path(a, b) := edge(a, b);\npath(a, c) := path(a, b) ^ edge(b, c) if a + 1 != c;",
        "path(a, b) := edge(a, b);\npath(a, c) := path(a, b) ^ edge(b, c) ^ weight(c, w) "
        "if w < 2.0;",
        'path(a, b) := edge(a, b);\npath(a, c) := path(a, b) ^ edge(b, c) if a != "x";',
        "path(a, b) := edge(a, b);\npath(a, c) @time(t + 1) := path(a, b) @time(t) ^ edge(b, c);",
        "path(a, b) := edge(a, b);\npath(a, c + 1) := path(a, b) ^ edge(b, c);",
        # Two atoms of the relation: the other would have to be every version so far.
        "path(a, b) := edge(a, b);\npath(a, c) := path(a, b) ^ path(b, c);",
        # A variable read from columns of two types.
        "path(a, b) := edge(a, b);\npath(a, c) := path(a, b) ^ name(b, c) ^ edge(c, _);",
    ],
)
def test_other_recursions_keep_spark_rounds(rules: str) -> None:
    assert _plan(rules) is None


@pytest.fixture(params=["cells", "hashes"])
def way(request, monkeypatch) -> str:
    """Rounds find known versions by address (small integer keys) or else by hash: both."""
    if request.param == "hashes":
        monkeypatch.setattr(linear_fixpoint, "CELLS", 0)
    return request.param


def _frame(pairs, t=0, exp=NEVER, new=True) -> pd.DataFrame:
    a, b = zip(*pairs, strict=True) if pairs else ((), ())
    n = len(a)
    return pd.DataFrame(
        {
            "a": np.array(a, dtype=np.int64),
            "b": np.array(b, dtype=np.int64),
            "t": np.full(n, t, dtype=np.int64),
            "kt": np.full(n, t, dtype=np.int64),
            "exp": np.full(n, exp, dtype=np.int64),
            "_tau": np.full(n, t, dtype=np.int64),
            linear_fixpoint.NEW: np.full(n, new, dtype=bool),
        }
    )


TC = "path(a, b) := edge(a, b);\npath(a, c) := path(a, b) ^ edge(b, c);"


def _columns(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """A frame's rows as the executor holds them: a numpy column per name."""
    return {c: frame[c].to_numpy() for c in frame.columns}


def _fixpoint(
    plan, rows: pd.DataFrame, lower: dict[str, pd.DataFrame], *window_and_budget: int
) -> tuple[pd.DataFrame, int]:
    """`linear_fixpoint.fixpoint` of frames, its versions as a frame."""
    lower_columns = {name: _columns(f) for name, f in lower.items()}
    out, rounds = linear_fixpoint.fixpoint(plan, _columns(rows), lower_columns, *window_and_budget)
    return out.to_pandas(), rounds


def _closure(edges, rows, budget=10**9):
    plan = _plan(TC)
    lower = {"edge": _frame(edges).drop(columns=linear_fixpoint.NEW)}
    return _fixpoint(plan, rows, lower, -NEVER, NEVER, budget)


@pytest.mark.usefixtures("way")
def test_a_cycles_closure_is_every_pair_after_as_many_rounds_as_nodes() -> None:
    cycle = [(i, (i + 1) % 6) for i in range(6)]
    out, ran = _closure(cycle, _frame(cycle))
    assert sorted(zip(out["a"], out["b"], strict=True)) == [
        (i, j) for i in range(6) for j in range(6)
    ]
    assert ran == 6 and not out[linear_fixpoint.NEW].any()
    assert list(out.columns) == ["a", "b", "t", "kt", "exp", "_tau", linear_fixpoint.NEW]


@pytest.mark.usefixtures("way")
def test_a_path_lives_as_long_as_its_shortest_lived_edge() -> None:
    """The time of a match is its latest version's, and it lives until its first expires."""
    plan = _plan(TC)
    edges = pd.concat([_frame([(0, 1)], t=0, exp=50), _frame([(1, 2)], t=10, exp=30)])
    lower = {"edge": edges.drop(columns=linear_fixpoint.NEW)}
    out, _ = _fixpoint(plan, _frame([(0, 1)], t=0, exp=50), lower, -NEVER, NEVER, 10**9)
    got = {(r.a, r.b): (r.t, r.kt, r.exp) for r in out.itertuples()}
    assert got == {(0, 1): (0, 0, 50), (0, 2): (10, 10, 30)}
    # Matches are only made at times in the epoch.
    out, _ = _fixpoint(plan, _frame([(0, 1)], t=0, exp=50), lower, -NEVER, 10, 10**9)
    assert set(zip(out["a"], out["b"], strict=True)) == {(0, 1)}


@pytest.mark.usefixtures("way")
def test_a_known_version_that_lives_less_is_replaced_by_a_longer_one() -> None:
    """Known (0, 2) dies at 5; a path through 1 makes it again, living for ever: it is new."""
    rows = pd.concat([_frame([(0, 2)], exp=5, new=False), _frame([(0, 1)])], ignore_index=True)
    out, _ = _closure([(1, 2)], rows)
    got = {(r.a, r.b): r.exp for r in out.itertuples()}
    assert got == {(0, 1): NEVER, (0, 2): NEVER}
    assert len(out) == 2


@pytest.mark.usefixtures("way")
def test_a_task_that_knows_too_much_stops_and_names_the_versions_still_to_join() -> None:
    chain = [(i, i + 1) for i in range(10)]
    out, ran = _closure(chain, _frame(chain), budget=20)
    assert 20 < len(out) < 55 and ran < 9
    waiting = out[out[linear_fixpoint.NEW]]
    assert len(waiting) > 0
    # What waits is the last round's: paths one edge longer than all the others.
    lengths = (out["b"] - out["a"]).to_numpy()
    assert set(lengths[out[linear_fixpoint.NEW].to_numpy()]) == {lengths.max()}


def test_keys_that_hash_alike_start_the_rounds_again_with_another_salt(monkeypatch) -> None:
    """A 64-bit hash finds keys; equal hashes are trusted only when the keys are equal."""
    monkeypatch.setattr(linear_fixpoint, "CELLS", 0)
    cycle = [(i, (i + 1) % 5) for i in range(5)]
    expected, _ = _closure(cycle, _frame(cycle))
    real = linear_fixpoint._hash
    salts = []

    def colliding(rows, key, salt):
        salts.append(salt)
        h = real(rows, key, salt)
        return np.zeros_like(h) if salt == linear_fixpoint.SALTS[0] else h

    monkeypatch.setattr(linear_fixpoint, "_hash", colliding)
    out, _ = _closure(cycle, _frame(cycle))
    assert linear_fixpoint.SALTS[1] in salts
    key = ["a", "b", "t", "kt", "exp"]
    assert (
        out[key].sort_values(key).values.tolist() == expected[key].sort_values(key).values.tolist()
    )


@pytest.mark.usefixtures("way")
def test_guards_and_negations_are_judged_as_spark_judges_them() -> None:
    """``a != c`` keeps a node from reaching itself; ``!blocked(c)`` holds at a match's time
    unless a version of ``blocked(c)`` is alive then (from its ``kt`` until its ``exp``)."""
    rules = (
        "path(a, b) := edge(a, b);\npath(a, c) := path(a, b) ^ edge(b, c) ^ !blocked(c) if a != c;"
    )
    plan = _plan(rules)
    cycle = [(0, 1), (1, 2), (2, 3), (3, 0)]
    blocked = pd.DataFrame(
        {"n": [2, 3], "t": [0, 20], "kt": [0, 20], "exp": [5, 30], "_tau": [0, 20]}
    ).astype("int64")
    lower = {"edge": _frame(cycle).drop(columns=linear_fixpoint.NEW), "blocked": blocked}
    out, _ = _fixpoint(plan, _frame(cycle), lower, -NEVER, NEVER, 10**9)
    assert all(a != b or (a, b) in cycle for a, b in zip(out["a"], out["b"], strict=True))
    # At time 0, 2 is blocked (until 5): only its edge reaches it, and no path goes on through
    # it; 3 is blocked only from 20.
    reached = {*cycle, (1, 3), (1, 0), (2, 0), (2, 1), (3, 1)}
    assert set(zip(out["a"], out["b"], strict=True)) == reached
    later = _frame(cycle, t=10)
    lower["edge"] = later.drop(columns=linear_fixpoint.NEW)
    out, _ = _fixpoint(plan, later, lower, -NEVER, NEVER, 10**9)
    pairs = {(a, b) for a in range(4) for b in range(4) if a != b}
    assert set(zip(out["a"], out["b"], strict=True)) == pairs


def test_keys_outside_the_ranges_of_their_cells_fall_back_on_hashes(monkeypatch) -> None:
    """Cells are laid out for the ranges of the given rows and lower relations; a key outside
    them (here: ranges made too narrow) starts the rounds again the general way."""
    chain = [(i, i + 1) for i in range(8)]
    expected, _ = _closure(chain, _frame(chain))
    assert len(expected) == 8 * 9 // 2
    monkeypatch.setattr(linear_fixpoint, "_range", lambda columns: (0, 3))
    made = _hash_ways(monkeypatch)
    out, _ = _closure(chain, _frame(chain))
    assert made == [linear_fixpoint.SALTS[0]]
    key = ["a", "b", "t", "kt", "exp"]
    assert out[key].sort_values(key).values.tolist() == (
        expected[key].sort_values(key).values.tolist()
    )


def _hash_ways(monkeypatch) -> list[int]:
    """The salts of the hash ways the rounds take, as they take them."""
    made: list[int] = []
    real = linear_fixpoint._Known.__init__

    def known(self, key, salt):
        made.append(salt)
        real(self, key, salt)

    monkeypatch.setattr(linear_fixpoint._Known, "__init__", known)
    return made


@pytest.mark.parametrize("seed", range(5))
def test_cells_and_hashes_find_the_same_versions(seed: int, monkeypatch) -> None:
    """Random graphs whose edges live for different spans, at different times, in a window:
    the rounds give the same versions whichever way they find them."""
    rng = np.random.default_rng(seed)
    n = 60
    edges = pd.DataFrame(
        {"a": rng.integers(0, 30, n), "b": rng.integers(0, 30, n), "t": rng.integers(0, 40, n)}
    ).astype("int64")
    edges["kt"] = edges["t"]
    edges["exp"] = edges["t"] + rng.integers(1, 60, n)
    rows = edges.assign(_tau=edges["t"], **{linear_fixpoint.NEW: True})
    plan = _plan(TC)

    def run() -> list:
        out, _ = _fixpoint(plan, rows, {"edge": edges}, 5, 50, 10**9)
        return out.sort_values(list(out.columns)).values.tolist()

    cells = run()
    monkeypatch.setattr(linear_fixpoint, "CELLS", 0)
    assert run() == cells
    assert len(cells) > n  # some paths were made


def test_versions_stamped_before_they_were_known_are_found_by_hash(monkeypatch) -> None:
    """Cells hold one version per key and ``kt``, which holds for what rounds make
    (``t`` = ``kt``); a given version stamped before it was known (``t`` < ``kt``) sends
    the rounds the general way, with the same outcome."""
    chain = [(i, i + 1) for i in range(5)]
    rows = _frame(chain)
    rows.loc[0, "t"] = -3  # known at 0, stamped at -3
    plan = _plan(TC)
    lower = {"edge": _frame(chain).drop(columns=linear_fixpoint.NEW)}
    made = _hash_ways(monkeypatch)
    out, _ = _fixpoint(plan, rows, lower, -NEVER, NEVER, 10**9)
    assert made and len(out) == 5 * 6 // 2
    assert ((out["a"] == 0) & (out["b"] == 1) & (out["t"] == -3)).sum() == 1
