"""The Parquet warehouse: the layout of docs/semantics.md (Storage), epoch-cut independence
of what it holds, and idempotent re-runs of any epoch."""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from dagster_pomo.engine.driver import Driver
from dagster_pomo.engine.inputs import prepare
from dagster_pomo.engine.lines import ANY_TIME
from dagster_pomo.engine.policy import Policy
from dagster_pomo.engine.spark.warehouse import Warehouse
from dagster_pomo.engine.versions import Version
from dagster_pomo.lang import compile_corpus
from dagster_pomo.timeline import epoch_key

CORPUS = """
.decl reading(sensor: str, value: float) lifetime 40;
.decl link(a: str, b: str);
.decl muted(sensor: str) lifetime 25;
per_sensor(s) @count @average(v) := reading(s, v);
connected(a, b) := link(a, b);
connected(a, c) := connected(a, b) ^ link(b, c);
alert(b, v) := reading(a, v) ^ connected(a, b) ^ !muted(b) if v > 5.0;
follow_up(s) @time(t + 35) := alert(s, _) @time(t);
"""
EPOCH, EPOCHS = 10, 12  # three times the longest reach of an event (40)
# A range in one Spark pass however small it is (a small one goes epoch by epoch in this
# process by default: see `LocalStrata.few_and_small`).
RANGES = Policy(in_process_epochs=0)


@pytest.fixture(scope="module")
def events_file(tmp_path_factory) -> Path:
    rng = random.Random(7)
    sensors = ["s1", "s2", "s3", "s4"]
    lines = []
    for _ in range(80):
        lines.append(
            {
                "relation": "reading",
                "t": rng.randrange(EPOCH * EPOCHS),
                "args": [rng.choice(sensors), round(rng.uniform(0, 10), 2)],
            }
        )
    for _ in range(10):
        lines.append(
            {
                "relation": "link",
                "t": rng.randrange(EPOCH * EPOCHS),
                "args": [rng.choice(sensors), rng.choice(sensors)],
            }
        )
    for _ in range(6):
        lines.append(
            {"relation": "muted", "t": rng.randrange(EPOCH * EPOCHS), "args": [rng.choice(sensors)]}
        )
    path = tmp_path_factory.mktemp("events") / "events.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _normal(row: Version) -> Version:
    """Averages summed in another order may differ in the last bits."""
    return Version(row.t, row.args, row.kt, row.exp, tuple(map(_digits, row.aggs)), row.tau)


def contents(evaluator, program) -> dict[str, Counter]:
    """Every stored version of every derived relation (as a multiset)."""
    return {
        name: Counter(_normal(r) for r in evaluator.versions(name))
        for name in (r.name for r in program.catalog if r.derived)
    }


def by_epoch(evaluator, relation: str, deferred: bool = False) -> dict[str, Counter]:
    """The rows of each stored epoch of ``relation`` (or of its deferred events), by the
    folder they are in (one read, by Spark's scan: a local relation knows no files)."""
    keys = [epoch_key(e) for e in evaluator.epochs]
    wh = evaluator.backend.wh
    scan = Warehouse(wh.spark, wh.root, wh.corpus, plan_rows=0)
    df = scan.read(relation, evaluator.backend.structs[relation], keys, deferred)
    folder = F.regexp_extract(F.input_file_name(), "/epoch=([^/]+)/", 1).alias("_folder")
    out: dict[str, Counter] = {k: Counter() for k in keys}
    for rec in df.select(folder, *df.columns).collect():
        out[rec[0]][tuple(_digits(v) for v in rec[1:])] += 1
    return out


def _digits(value: object) -> object:
    """A float to 9 significant digits: sums in another order differ in the last bits; a
    list (a collected set, provenance) as a tuple of such."""
    if isinstance(value, list):
        return tuple(_digits(v) for v in value)
    return float(f"{value:.9g}") if isinstance(value, float) else value


def partitions(root: Path, program, evaluator) -> dict[tuple[str, str], Counter]:
    """Every partition's rows, so a re-run that moved rows between epochs would show."""
    return {
        (rel, key): rows
        for rel in (r.name for r in program.catalog if r.derived)
        for key, rows in by_epoch(evaluator, rel).items()
    }


def test_many_epochs_one_by_one_equal_one_batch_a_range_at_once_and_reruns(
    tmp_path: Path, events_file: Path
) -> None:
    program = compile_corpus(CORPUS, "sensors.pomo")
    until = EPOCH * EPOCHS

    stepwise = Driver.for_run(
        program,
        prepare(program, events_file, EPOCH, 0, until, window=ANY_TIME),
        str(tmp_path / "stepwise"),
        policy=RANGES,
    )
    assert len(stepwise.epochs) == EPOCHS
    for epoch in stepwise.epochs:
        stepwise.evaluate_epoch(epoch)

    batch = Driver.for_run(
        program,
        prepare(program, events_file, until, 0, until, window=ANY_TIME),
        str(tmp_path / "batch"),
    )
    (only,) = batch.epochs
    batch.evaluate_epoch(only)

    stored = contents(stepwise, program)
    assert stored == contents(batch, program)
    assert sum(len(v) for v in stored.values()) > 100, "the case must derive a fair amount"
    assert stored["follow_up"], "deferred events must reach the warehouse"

    layout = tmp_path / "stepwise" / "sensors" / "alert" / f"epoch={epoch_key(stepwise.epochs[3])}"
    assert layout.is_dir() and list(layout.glob("*.parquet"))

    # Every alert defers a follow-up past its epoch's end; an epoch with none keeps no folder.
    deferred = tmp_path / "stepwise" / "sensors" / "_deferred" / "follow_up"
    alerting = {f"epoch={key}" for key, rows in by_epoch(stepwise, "alert").items() if rows}
    assert alerting and alerting != {f"epoch={epoch_key(e)}" for e in stepwise.epochs}
    assert {p.name for p in deferred.iterdir()} == alerting

    before = partitions(tmp_path / "stepwise", program, stepwise)
    for index in (0, EPOCHS // 2, EPOCHS - 1):
        stepwise.evaluate_epoch(stepwise.epochs[index])
    assert partitions(tmp_path / "stepwise", program, stepwise) == before

    # A range evaluated at once (a Dagster run over a partition range) fills every
    # partition, and every epoch's deferred events, as epoch by epoch; a later run of any
    # epoch, or of part of the range, changes nothing.
    ranged = Driver.for_run(
        program,
        prepare(program, events_file, EPOCH, 0, until, window=ANY_TIME),
        str(tmp_path / "ranged"),
        policy=RANGES,
    )
    assert _over_range(ranged, program, ranged.epochs) == len(program.strata)
    assert partitions(tmp_path / "ranged", program, ranged) == before
    deferred = by_epoch(stepwise, "follow_up", deferred=True)
    assert by_epoch(ranged, "follow_up", deferred=True) == deferred
    for index in (0, EPOCHS // 2, EPOCHS - 1):
        ranged.evaluate_epoch(ranged.epochs[index])
    assert partitions(tmp_path / "ranged", program, ranged) == before
    assert _over_range(stepwise, program, stepwise.epochs[3:9]) == len(program.strata)
    assert partitions(tmp_path / "stepwise", program, stepwise) == before
    assert by_epoch(stepwise, "follow_up", deferred=True) == deferred


RECURSIVE_RULE = "connected(a, c) := connected(a, b) ^ link(b, c);\n"
DELAYED_RULE = "connected(a, c) @time(t + 3) := connected(a, b) @time(t) ^ link(b, c);\n"


@pytest.mark.parametrize(
    ("rule", "passes"),
    [("", 2), (DELAYED_RULE, 3 * 2 + 6)],
    ids=["no-recursion", "recursion-that-defers"],
)
def test_pomo_run_takes_a_range_in_few_passes_and_a_short_last_epoch_alone(
    tmp_path: Path, events_file: Path, rule: str, passes: int
) -> None:
    """`pomo run` evaluates its epochs of one length at once where a Dagster range would, then
    a shorter last epoch on its own, and stores what epoch by epoch stores, in every
    partition and every epoch's deferred events: all strata in one pass (a recursive one
    too: the test above evaluates its strata so, each over the range), or, when a
    recursive relation defers events, stratum by stratum with that one epoch by epoch
    (each other stratum: the range, then the last epoch)."""
    program = compile_corpus(CORPUS.replace(RECURSIVE_RULE, rule), "sensors.pomo")
    until = EPOCH * 6 - 4  # six epochs, the last 6 long
    stored = {}
    for way in ("stepwise", "run"):
        evaluator = Driver.for_run(
            program,
            prepare(program, events_file, EPOCH, 0, until, window=ANY_TIME),
            str(tmp_path / way),
            policy=RANGES,
        )
        if way == "stepwise":
            for epoch in evaluator.epochs:
                evaluator.evaluate_epoch(epoch)
        else:
            assert evaluator.evaluate_range(evaluator.epochs).passes == passes
        deferred = {n: by_epoch(evaluator, n, deferred=True) for n in sorted(evaluator.plan.defers)}
        stored[way] = (partitions(tmp_path / way, program, evaluator), deferred)
    assert all(any(d.values()) for d in stored["stepwise"][1].values()), "deferred events"
    assert stored["run"] == stored["stepwise"]


def test_a_range_from_the_first_epoch_takes_the_facts_before_it(tmp_path: Path) -> None:
    """A backfill of every partition starts with the first epoch, which takes the facts from
    before it (time 0, long before the first event): evaluated in one pass, the range stores
    them, and what they derive, where epoch by epoch stores them."""
    corpus = """.decl capacity(tank: str, max: float);
    capacity("north", 100.0);
    known("south");
    known(tank) := capacity(tank, _);
    seen(tank) := known(tank);
    high(tank, level) := level(tank, level) ^ capacity(tank, max) if level > 0.9 * max;"""
    program = compile_corpus(corpus, "tanks.pomo")
    t0 = 1_700_000_000_000
    path = tmp_path / "events.jsonl"
    path.write_text(
        "".join(
            json.dumps({"relation": "level", "t": t0 + i * 3_600_000, "args": ["north", 95.0]})
            + "\n"
            for i in range(3)
        )
    )
    stored = {}
    for way in ("stepwise", "ranged"):
        evaluator = Driver.for_run(
            program,
            prepare(program, path, 3_600_000, window=ANY_TIME),
            str(tmp_path / way),
            policy=RANGES,
        )
        if way == "stepwise":
            for epoch in evaluator.epochs:
                evaluator.evaluate_epoch(epoch)
        else:
            assert _over_range(evaluator, program, evaluator.epochs) == len(program.strata)
        stored[way] = partitions(tmp_path / way, program, evaluator)
    first = str(t0 // 3_600_000 * 3_600_000)
    seen = stored["stepwise"][("seen", first)]
    assert sorted(row[:2] for row in seen) == [("north", 0), ("south", 0)]  # (tank, t)
    assert stored["ranged"] == stored["stepwise"]


def _over_range(driver, program, epochs) -> int:
    """Each stratum over ``epochs``, as a Dagster run over a partition range does
    (`Driver.evaluate_strata`): over all of them at once where it can, else epoch by epoch;
    how many strata ran at once."""
    return sum(
        driver.evaluate_strata([stratum], epochs).passes < len(epochs)
        for stratum in driver.plan.strata
    )


def test_an_epochs_strata_wait_for_what_they_read_and_a_failure_starts_nothing_more(
    tmp_path: Path, events_file: Path
) -> None:
    """Strata that read nothing of each other's may run at the same time; one that reads
    another's relations starts only once that one is stored. When a stratum fails, the epoch
    fails with its error, the strata under way finish, and the strata after it never start."""
    program = compile_corpus(CORPUS, "sensors.pomo")
    evaluator = Driver.for_run(
        program,
        prepare(program, events_file, EPOCH * 10, 0, EPOCH * 20, window=ANY_TIME),
        str(tmp_path / "wh"),
        policy=Policy(in_process_inputs=0),  # on Spark, whose jobs the strata's threads run
    )
    assert evaluator.concurrency == 2
    by_relation = {r: s for s in program.strata for r in s.relations}
    reads = {
        "alert": {"connected"},
        "follow_up": {"alert"},
        "connected": set(),
        "per_sensor": set(),
    }
    log: list[tuple[str, str, str]] = []
    lock = threading.Lock()
    plain = evaluator.backend.evaluate_stratum

    def logged(stratum, epoch, carried=None):  # noqa: ANN001, ANN202
        name = stratum.relations[0]
        with lock:
            log.append(("start", name, threading.current_thread().name))
        try:
            if name == failing[0]:
                raise RuntimeError(f"{name} failed")
            return plain(stratum, epoch, carried)
        finally:
            with lock:
                log.append(("end", name, threading.current_thread().name))

    evaluator.backend.evaluate_stratum = logged  # type: ignore[method-assign]
    failing = [""]
    stats = evaluator.evaluate_epoch(evaluator.epochs[0])
    assert [s.relations[0] for s in stats.strata] == [
        s.relations[0] for s in program.strata if not s.inductive
    ]
    assert stats.spark_jobs, "jobs run in the strata's threads still count for the epoch"
    for name, needs in reads.items():
        assert by_relation[name].relations == (name,)
        begun = log.index(("start", name, _thread(log, name)))
        for need in needs:
            assert log.index(("end", need, _thread(log, need))) < begun, (name, need)
    assert all(thread.startswith("pomo-stratum") for _, _, thread in log)
    # `per_sensor` and `connected` read nothing of each other's: both start before either ends.
    first_two = [(kind, name) for kind, name, _ in log[:2]]
    assert sorted(first_two) == [("start", "connected"), ("start", "per_sensor")]

    log.clear()
    failing[0] = "connected"
    with pytest.raises(RuntimeError, match="connected failed"):
        evaluator.evaluate_epoch(evaluator.epochs[1])
    started = {name for kind, name, _ in log if kind == "start"}
    ended = {name for kind, name, _ in log if kind == "end"}
    assert "alert" not in started and "follow_up" not in started
    assert started == ended, "the strata under way finish before the epoch fails"


def _thread(log: list[tuple[str, str, str]], name: str) -> str:
    return next(thread for _, n, thread in log if n == name)


def test_a_warehouse_on_another_file_system_holds_the_same_results_and_the_quarantine(
    tmp_path: Path, events_file: Path
) -> None:
    """Object stores and HDFS are reached through Hadoop's file systems, not Python's: a view
    file system mounted over a local folder takes that path, with no server to start. There
    Spark stores the inputs; on the local disk this process writes their files itself, and
    the two hold the same rows in the same epochs."""
    program = compile_corpus(CORPUS, "sensors.pomo")
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    cluster = f"pomo{abs(hash(str(tmp_path)))}"
    prepared = prepare(
        program, events_file, EPOCH * EPOCHS // 2, 0, EPOCH * EPOCHS, window=ANY_TIME
    )

    local = Driver.for_run(program, prepared, str(tmp_path / "local"))
    conf = local.backend.spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    conf.set(f"fs.viewfs.mounttable.{cluster}.link./warehouse", mounted.as_uri())
    remote = Driver.for_run(
        program, prepared, f"viewfs://{cluster}/warehouse", session=local.backend.spark
    )
    for rel in program.catalog.inputs:
        assert by_epoch(remote, rel.name) == by_epoch(local, rel.name), rel.name
    assert sum(len(rows) for rows in by_epoch(local, "reading").values()) == len(
        prepared.ingested.events["reading"]
    )
    for epoch in local.epochs:
        local.evaluate_epoch(epoch)
        remote.evaluate_epoch(epoch)
    remote.evaluate_epoch(remote.epochs[1])  # a re-run replaces the epoch there too

    assert contents(remote, program) == contents(local, program)
    assert list((mounted / "sensors" / "alert").glob("epoch=*/*.parquet"))
    deferred = {
        p.name for p in (tmp_path / "local" / "sensors" / "_deferred" / "follow_up").iterdir()
    }
    assert deferred, "the case must defer events"
    assert {p.name for p in (mounted / "sensors" / "_deferred" / "follow_up").iterdir()} == deferred

    text = '{"line": 3, "reason": "no such relation `levle`"}\n'
    path = remote.backend.wh.write_text("_quarantine.jsonl", text)
    assert path == f"viewfs://{cluster}/warehouse/sensors/_quarantine.jsonl"
    assert (mounted / "sensors" / "_quarantine.jsonl").read_text() == text
    assert remote.backend.wh.read_text("_quarantine.jsonl") == text
    assert remote.backend.wh.read_text("_landing.json") is None
    assert remote.backend.wh.write_text("_quarantine.jsonl", "") == path, (
        "a second write replaces it"
    )
    assert (mounted / "sensors" / "_quarantine.jsonl").read_text() == ""


def test_files_beside_the_warehouse_are_replaced_whole_by_writers_at_once(tmp_path: Path) -> None:
    """Two runs may record the landing files at the same time: each write replaces the file
    whole, none fails, and no partial file is left behind."""
    from dagster_pomo.engine.spark.session import spark_session

    wh = Warehouse(spark_session(), str(tmp_path), "sensors")
    texts = [json.dumps({"writer": w, "pad": "x" * 20_000}) for w in range(8)]
    errors: list[BaseException] = []

    def write(text: str) -> None:
        try:
            for _ in range(25):
                wh.write_text("_landing.json", text)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(t,)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert wh.read_text("_landing.json") in texts
    assert [p.name for p in (tmp_path / "sensors").iterdir()] == ["_landing.json"]


def test_staging_folders_a_killed_run_left_go_a_day_later(tmp_path: Path) -> None:
    """Tasks stage their files in folders of their own; one a killed run left is removed
    by the next writer once a day old, while another writer's fresh folder is kept."""
    import os

    from dagster_pomo.engine.spark.session import spark_session
    from dagster_pomo.engine.spark.warehouse import STALE_SECONDS, Warehouse

    wh = Warehouse(spark_session(), str(tmp_path), "graph")
    base = tmp_path / "graph" / "_staging"
    left, busy = base / "path-left", base / "path-busy"
    for folder in (left, busy):
        folder.mkdir(parents=True)
        (folder / "part-00000.snappy.parquet").write_bytes(b"half")
    old = os.stat(left).st_mtime - STALE_SECONDS - 60
    os.utime(left, (old, old))
    mine = wh.staging("path")
    assert mine is not None and Path(mine).parent == base
    assert sorted(p.name for p in base.iterdir()) == sorted(["path-busy", Path(mine).name])
    wh.discard(mine)
    assert [p.name for p in base.iterdir()] == ["path-busy"]


def test_derived_epochs_hold_the_same_rows_whoever_writes_them(
    tmp_path: Path, events_file: Path
) -> None:
    """Small epochs of derived relations come to this process and it writes them. An epoch
    with more input events than that bound, and from then on a relation with more rows than
    it in an epoch, go to Spark's writer, deferred events too. The warehouse holds the same
    rows in the same folders either way."""
    program = compile_corpus(CORPUS, "sensors.pomo")
    prepared = prepare(program, events_file, 2 * EPOCH, 0, EPOCH * EPOCHS, window=ANY_TIME)
    plans = Policy(in_process_inputs=0)  # Spark's plans, whoever writes
    ours = Driver.for_run(program, prepared, str(tmp_path / "ours"), policy=plans)
    mixed = Driver.for_run(
        program, prepared, str(tmp_path / "mixed"), policy=plans, session=ours.backend.spark
    )
    mixed.backend.store.COLLECT_ROWS = 2  # below every epoch's input events...
    small = {epoch_key(e) for e in mixed.epochs[::2]}
    mixed.backend.store._inputs = dict.fromkeys(
        small, 1
    )  # ...but every other epoch counts as small
    for epoch in ours.epochs:
        ours.evaluate_epoch(epoch)
        mixed.evaluate_epoch(epoch)

    assert partitions(tmp_path / "ours", program, ours) == partitions(
        tmp_path / "mixed", program, mixed
    )
    for relation in ("alert", "follow_up"):
        assert by_epoch(ours, relation, deferred=True) == by_epoch(mixed, relation, deferred=True)
    assert any(by_epoch(ours, "follow_up", deferred=True).values()), "the case must defer events"

    derived = {r.name for r in program.catalog if r.derived}

    def writers(root: Path) -> dict[tuple[str, str], set[str]]:
        """Who wrote each derived epoch's files: Spark's writer names them part-N-UUID-c000."""
        out: dict[tuple[str, str], set[str]] = {}
        for f in (root / "sensors").glob("*/epoch=*/*.parquet"):
            if f.parent.parent.name in derived:
                key = (f.parent.parent.name, f.parent.name.removeprefix("epoch="))
                out.setdefault(key, set()).add("spark" if "-c000" in f.name else "process")
        return out

    ours_by = writers(tmp_path / "ours")
    assert {rel for rel, _ in ours_by} == derived
    assert all(w == {"process"} for (rel, _), w in ours_by.items() if rel != "connected"), (
        "only the recursion's rounds may hand over to Spark"
    )
    mixed_by = writers(tmp_path / "mixed")
    assert all(
        w == {"spark"}
        for (rel, key), w in mixed_by.items()
        if key not in small and rel != "connected"  # the rounds' tasks write their own
    )
    assert {"process"} in [w for (_, key), w in mixed_by.items() if key in small]
    assert mixed.backend.store._large and {"alert", "per_sensor"} & mixed.backend.store._large
    for rel in mixed.backend.store._large:
        assert any(w == {"spark"} for (r, key), w in mixed_by.items() if r == rel and key in small)


FLAT = """
.decl reading(sensor: str, value: float) lifetime 40;
.decl link(a: str, b: str);
.decl muted(sensor: str) lifetime 25;
per_sensor(s) @count @average(v) := reading(s, v);
per_tick(s) @average(v) @time(tick - period / 2) :=
    reading(s, v) @time(seen) ^ clock(offset, period) @time(tick)
    if seen < tick ^ seen >= tick - period
    where offset = 0, period = 10;
alert(s, v) := reading(s, v) ^ !muted(s) if v > 5.0;
follow_up(s) @time(t + 35) := alert(s, _) @time(t);
"""


def test_small_epochs_run_without_generated_code_and_hold_the_same_rows(
    tmp_path: Path, events_file: Path
) -> None:
    """A small epoch of a corpus with no recursion runs Spark's plans interpreted: it
    compiles no code, where compiled plans compile each epoch's anew (its bounds are
    written into the code). It stores the same rows, deferred events too; the session's
    settings are as they were after each epoch, and a user's own setting is left alone."""
    from dagster_pomo.engine.spark.epoch_jobs import INTERPRETED

    program = compile_corpus(FLAT, "flat.pomo")
    prepared = prepare(program, events_file, 2 * EPOCH, 0, EPOCH * EPOCHS, window=ANY_TIME)
    plans = Policy(in_process_inputs=0)  # Spark's plans, both
    interpreted = Driver.for_run(program, prepared, str(tmp_path / "interpreted"), policy=plans)
    spark = interpreted.backend.spark
    # Every epoch too large to interpret:
    never = Policy(in_process_inputs=0, interpret_inputs=-1)
    compiled = Driver.for_run(
        program, prepared, str(tmp_path / "compiled"), policy=never, session=spark
    )
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics

    def compiling(evaluator, epoch) -> int:  # noqa: ANN001
        """Classes Spark's code generator compiled while ``evaluator`` ran ``epoch``."""
        before = metrics.METRIC_COMPILATION_TIME().getCount()
        evaluator.evaluate_epoch(epoch)
        return metrics.METRIC_COMPILATION_TIME().getCount() - before

    classes: dict[str, list[int]] = {"interpreted": [], "compiled": []}
    # One way's epochs after the other's: Spark keeps the classes it generated in a cache
    # of a hundred, which the compiled epochs' dozens each would empty of the few that
    # every plan needs, and an interpreted epoch would compile one of them again.
    for epoch in interpreted.epochs:
        classes["interpreted"].append(compiling(interpreted, epoch))
        assert all(spark.conf.get(k, None) is None for k in INTERPRETED)
    for epoch in compiled.epochs:
        classes["compiled"].append(compiling(compiled, epoch))
    # The first epoch may compile the few classes Spark generates whatever the plan.
    later = {how: sum(counts[1:]) for how, counts in classes.items()}
    assert later["interpreted"] == 0 and later["compiled"] > 0, classes

    root = tmp_path / "interpreted"
    assert partitions(root, program, interpreted) == partitions(
        tmp_path / "compiled", program, compiled
    )
    assert any(by_epoch(interpreted, "per_tick").values()), "the case must resample"
    for relation in ("alert", "follow_up"):
        want = by_epoch(compiled, relation, deferred=True)
        assert by_epoch(interpreted, relation, deferred=True) == want
    assert any(by_epoch(interpreted, "follow_up", deferred=True).values())

    # A warehouse with none of the history stored: the epoch's plans differ from every plan
    # compiled above, so compiled plans must compile classes of their own.
    own = Driver.for_run(program, prepared, str(tmp_path / "own"), policy=plans, session=spark)
    spark.conf.set("spark.sql.codegen.wholeStage", "true")
    try:
        assert compiling(own, own.epochs[-1]) > 0
        assert spark.conf.get("spark.sql.codegen.wholeStage") == "true"
        assert spark.conf.get("spark.sql.codegen.factoryMode", None) is None
    finally:
        spark.conf.unset("spark.sql.codegen.wholeStage")


@pytest.mark.parametrize("corpus", [FLAT, CORPUS], ids=["flat", "with-recursion"])
def test_small_epochs_worked_out_in_this_process_hold_what_spark_holds(
    tmp_path: Path, events_file: Path, corpus: str
) -> None:
    """A small epoch's strata are worked out in this process, with no Spark job (a linear
    recursion's later rounds on the executor Spark's tasks run them on); the warehouse
    then holds what Spark's plans store, folder by folder, deferred events too, epoch
    after epoch (a recursion's first round joins versions of earlier epochs)."""
    program = compile_corpus(corpus, "sensors.pomo")
    prepared = prepare(program, events_file, 2 * EPOCH, 0, EPOCH * EPOCHS, window=ANY_TIME)
    here = Driver.for_run(program, prepared, str(tmp_path / "here"))
    plans = Policy(in_process_inputs=0)
    spark = Driver.for_run(
        program, prepared, str(tmp_path / "spark"), policy=plans, session=here.backend.spark
    )
    for epoch in here.epochs:
        ours, theirs = here.evaluate_epoch(epoch), spark.evaluate_epoch(epoch)
        assert theirs.spark_jobs
        assert not ours.spark_jobs, ours
        assert all(s.in_process for s in ours.strata), ours
        assert ours.partitions_read == theirs.partitions_read
        assert {s.index: s.rows for s in ours.strata} == {s.index: s.rows for s in theirs.strata}

    assert partitions(tmp_path / "here", program, here) == partitions(
        tmp_path / "spark", program, spark
    )
    for relation in ("alert", "follow_up"):
        assert by_epoch(here, relation, deferred=True) == by_epoch(spark, relation, deferred=True)
    assert any(by_epoch(here, "follow_up", deferred=True).values()), "the case must defer events"
    assert sum(map(len, by_epoch(here, "alert").values())) > 10, "the case must alert"
    # Run again, an epoch changes nothing.
    before = partitions(tmp_path / "here", program, here)
    here.evaluate_epoch(here.epochs[2])
    assert partitions(tmp_path / "here", program, here) == before


def test_a_join_too_large_for_this_process_goes_to_spark(
    tmp_path: Path, events_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A join that would make more matches than this process takes on leaves the stratum to
    Spark, which stores the same rows; an epoch as large as one whose stratum went to Spark
    goes there at once (a range of small epochs is taken epoch by epoch here: each would
    otherwise work its joins out twice)."""
    from dagster_pomo.engine.local.column_joins import TooLarge
    from dagster_pomo.engine.spark.local_strata import LocalStrata

    program = compile_corpus(FLAT, "flat.pomo")
    prepared = prepare(program, events_file, 2 * EPOCH, 0, EPOCH * EPOCHS, window=ANY_TIME)
    tight = Policy(local_matches=0)  # every join is too large for this process
    here = Driver.for_run(program, prepared, str(tmp_path / "here"), policy=tight)
    tried: list[tuple[int, int, bool]] = []  # stratum, the epoch's input events, too large
    attempt = LocalStrata.work_out

    def spy(self, stratum, epoch, carried=None):  # type: ignore[no-untyped-def]
        inputs = self.ev.store.input_events(epoch_key(epoch))
        try:
            stats = attempt(self, stratum, epoch, carried)
        except TooLarge:
            tried.append((stratum.index, inputs, True))
            raise
        tried.append((stratum.index, inputs, False))
        return stats

    monkeypatch.setattr(LocalStrata, "work_out", spy)
    plans = Policy(in_process_inputs=0)
    spark = Driver.for_run(
        program, prepared, str(tmp_path / "spark"), policy=plans, session=here.backend.spark
    )
    stats = [here.evaluate_epoch(e) for e in here.epochs[:3]]
    for epoch in spark.epochs[:3]:
        spark.evaluate_epoch(epoch)
    assert all(s.spark_jobs for s in stats)
    assert any(large for _, _, large in tried), "the case must make a join too large"
    for i, (stratum, inputs, _) in enumerate(tried):  # after a failure, smaller epochs only
        failed = [n for s, n, large in tried[:i] if s == stratum and large]
        assert not failed or inputs < min(failed), tried
    assert partitions(tmp_path / "here", program, here) == partitions(
        tmp_path / "spark", program, spark
    )


def test_a_range_of_small_epochs_goes_epoch_by_epoch_in_this_process(
    tmp_path: Path, events_file: Path
) -> None:
    """A range whose every epoch is small enough for this process is worked out epoch by
    epoch here, whatever its total (from a fresh process that is faster than Spark's one
    pass); one epoch too large, and the range goes in one pass. The warehouse holds the
    same either way."""
    program = compile_corpus(FLAT, "flat.pomo")
    prepared = prepare(program, events_file, 2 * EPOCH, 0, EPOCH * EPOCHS, window=ANY_TIME)
    probe = Driver.for_run(program, prepared, str(tmp_path / "probe"))
    sizes = [probe.backend.store.input_events(epoch_key(e)) for e in probe.epochs]
    assert len(set(sizes)) > 1 and min(sizes) > 0, sizes
    largest = max(sizes)
    stored = {}
    for way, policy, passes in [
        ("each small", Policy(in_process_inputs=largest), len(sizes)),
        ("one too large", Policy(in_process_inputs=largest - 1), 1),
    ]:
        driver = Driver.for_run(program, prepared, str(tmp_path / way), policy=policy)
        assert driver.evaluate_range(driver.epochs).passes == passes, way
        stored[way] = partitions(tmp_path / way, program, driver)
    assert stored["one too large"] == stored["each small"]


def test_writers_at_once_never_trip_over_the_staging_folder(tmp_path: Path) -> None:
    """Strata of an epoch run side by side and each writes through ``_staging/``, which the
    last writer to finish removes: writers at once must neither fail nor lose an epoch."""
    import pyarrow as pa

    from dagster_pomo.engine.spark.session import spark_session

    wh = Warehouse(spark_session(), str(tmp_path), "c")
    table = pa.table({"x": [1, 2, 3]})
    failed: list[BaseException] = []

    def write(relation: str) -> None:
        try:
            for key in range(200):
                wh.put(relation, str(key), table)
        except BaseException as error:  # noqa: BLE001 (reported below)
            failed.append(error)

    threads = [threading.Thread(target=write, args=(f"r{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failed, failed
    assert all(wh.stored_rows(f"r{i}", str(k)) == 3 for i in range(4) for k in range(200))
    assert not (tmp_path / "c" / "_staging").exists()


def test_a_large_epoch_is_written_in_parts_side_by_side_and_reads_back_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An epoch this process writes past `PART_ROWS` rows is cut into one file a core,
    written at once; the files read in order of their names, by this process or by Spark,
    are the table it put, row for row, and a read of a range of times takes its rows."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    from dagster_pomo.engine.spark import warehouse
    from dagster_pomo.engine.spark.session import spark_session

    monkeypatch.setattr(warehouse, "PART_ROWS", 10)
    rows = 101
    table = pa.table(
        {
            "name": [f"n{i % 7}" for i in range(rows)],
            "t": [(i * 37) % 50 for i in range(rows)],
            "kt": list(range(rows)),
        }
    )
    wh = warehouse.Warehouse(spark_session(), str(tmp_path), "c")
    wh.put("r", "k", table)
    files = sorted((tmp_path / "c" / "r" / "epoch=k").glob("*.parquet"))
    assert len(files) == min(os.cpu_count() or 1, 10)
    assert pa.concat_tables(pq.read_table(f) for f in files).equals(table)

    other = warehouse.Warehouse(spark_session(), str(tmp_path), "c")  # holds nothing in memory
    assert other.read_table("r", ["k"], table.schema).equals(table)
    by_spark = wh.spark.read.parquet(str(files[0].parent)).collect()
    put = zip(*table.to_pydict().values(), strict=True)
    assert sorted(tuple(r) for r in by_spark) == sorted(put)
    some = other.read_table("r", ["k"], table.schema, times=(10, 30))
    assert sorted(some["kt"].to_pylist()) == [i for i in range(rows) if 10 <= (i * 37) % 50 < 30]


def test_a_table_put_is_read_from_memory_only_while_its_files_are_those_it_became(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An epoch this process put and still holds is read back from memory, with no file
    decoded, exactly as its files give it (a range of times too); once another writer
    replaces or removes the epoch, or the table is let go of, reads come from the files."""
    import gc

    import pyarrow as pa
    import pyarrow.parquet as pq

    from dagster_pomo.engine.spark import warehouse
    from dagster_pomo.engine.spark.session import spark_session

    decoded: list[str] = []
    read = pq.read_table

    def counted(source, **kw):  # noqa: ANN001, ANN202
        decoded.append(str(source))
        return read(source, **kw)

    monkeypatch.setattr(warehouse.pq, "read_table", counted)
    schema = pa.schema([("x", pa.int64()), ("t", pa.int64())])
    first = pa.table({"x": [1, 2, 3, 4], "t": [5, 1, 9, 1]}, schema=schema)
    wh = warehouse.Warehouse(spark_session(), str(tmp_path), "c")
    wh.put("r", "k", first)
    assert wh.read_table("r", ["k"], schema).equals(first)
    assert wh.read_table("r", ["k"], schema, times=(1, 6))["x"].to_pylist() == [1, 2, 4]
    assert wh.read_table("r", ["k"], schema, times=(2, None))["x"].to_pylist() == [1, 3]
    assert decoded == []

    second = pa.table({"x": [7], "t": [2]}, schema=schema)
    warehouse.Warehouse(spark_session(), str(tmp_path), "c").put("r", "k", second)
    decoded.clear()  # (the other writer read what the epoch held before)
    assert wh.read_table("r", ["k"], schema).equals(second)  # another writer's files
    assert len(decoded) == 1

    wh.put("r", "k", first)
    wh.remove("r", "k")
    assert wh.read_table("r", ["k"], schema).num_rows == 0

    wh.put("r", "k", first)
    del first
    gc.collect()
    decoded.clear()
    assert wh.read_table("r", ["k"], schema)["x"].to_pylist() == [1, 2, 3, 4]
    assert len(decoded) == 1


def test_an_epoch_reads_again_only_the_stored_epochs_whose_files_changed(
    tmp_path: Path, events_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Epoch by epoch in this process, what an epoch read or stored is what the next one
    reads of its history: every stored epoch is read from its files at most once in the
    run. An epoch another writer rewrote in between is read again, and the epoch after it
    comes out as it does for a process that never held anything."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from dagster_pomo.engine.local.arrow_schemas import arrow_schema

    program = compile_corpus(FLAT, "flat.pomo")
    prepared = prepare(program, events_file, 2 * EPOCH, 0, EPOCH * EPOCHS, window=ANY_TIME)
    root = str(tmp_path / "wh")
    held = Driver.for_run(program, prepared, root)
    wh = held.backend.wh
    reads: Counter = Counter()
    read_table = wh.read_table

    def counted(relation, keys, schema, deferred=False, **kw):  # noqa: ANN001, ANN202
        keys = list(keys)
        if not deferred:  # deferred events are read per epoch, filtered to it
            reads.update((relation, k) for k in keys)
        return read_table(relation, keys, schema, deferred, **kw)

    monkeypatch.setattr(wh, "read_table", counted)
    epochs = held.epochs
    assert len(epochs) > 3
    for epoch in epochs:
        stats = held.evaluate_epoch(epoch)
        assert all(s.in_process for s in stats.strata), epoch
    assert reads and max(reads.values()) == 1, reads.most_common(3)

    # Another writer changes the readings of an epoch, which the next one's aggregates read.
    fifth, sixth = epoch_key(epochs[-2]), epoch_key(epochs[-1])
    schema = arrow_schema(held.backend.schemas["reading"])
    table = read_table("reading", [fifth], schema)
    assert table.num_rows > 0
    column = table.schema.get_field_index("value")
    changed = table.set_column(column, "value", pc.add(table["value"], pa.scalar(100.0)))
    before = {k: v for k, v in partitions(tmp_path / "wh", program, held).items() if k[1] == sixth}
    wh.put("reading", fifth, changed)
    again = reads[("reading", fifth)]
    held.evaluate_epoch(epochs[-1])
    assert reads[("reading", fifth)] == again + 1
    after = {k: v for k, v in partitions(tmp_path / "wh", program, held).items() if k[1] == sixth}
    assert after != before, "the change must reach the next epoch"

    fresh = Driver.open(
        program,
        prepared.schemas,
        root,
        epochs,
        prepared.epoch_range.start,
        prepared.ingested.events,
    )
    fresh.evaluate_epoch(epochs[-1])
    anew = {k: v for k, v in partitions(tmp_path / "wh", program, fresh).items() if k[1] == sixth}
    assert anew == after


def test_few_stored_versions_reach_spark_as_a_local_relation_and_more_as_a_scan(
    tmp_path: Path, events_file: Path
) -> None:
    """`Policy.plan_rows`: stored epochs holding at most that many versions together (the
    deferred ones counted apart) go into Spark's plans as a local relation this process
    read, every row of them; more, or a bound of 0, as Spark's scan of their files."""
    import pyarrow as pa
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from dagster_pomo.engine.spark.session import spark_session

    struct = StructType([StructField("w", StringType()), StructField("t", LongType())])
    spark = spark_session()

    def table(*rows: tuple[str, int]) -> pa.Table:
        return pa.table(
            {"w": pa.array([w for w, _ in rows], pa.string()), "t": [t for _, t in rows]}
        )

    def read(bound: int, keys: list[str], deferred: bool = False) -> tuple[str, Counter]:
        df = Warehouse(spark, str(tmp_path), "c", bound).read_stored("r", struct, keys, deferred)
        assert df is not None
        plan = df._jdf.queryExecution().analyzed().toString()
        how = "local" if "LocalRelation" in plan else "scan" if "parquet" in plan else plan
        return how, Counter(tuple(row) for row in df.collect())

    wh = Warehouse(spark, str(tmp_path), "c")
    wh.put("r", "1", table(("fig", 1), ("kiwi", 2)))
    wh.put("r", "2", table(("pear", 3), ("fig", 4)))
    wh.put("r", "2", table(("late", 30)), deferred=True)
    wh.put("r", "0", table())
    both = Counter([("fig", 1), ("kiwi", 2), ("pear", 3), ("fig", 4)])
    assert read(4, ["1", "2", "3"]) == ("local", both)  # epoch 3 is not stored
    # an empty epoch between two others: PySpark dropped the rows after an empty batch
    assert read(4, ["1", "0", "2"]) == ("local", both)
    assert read(3, ["1", "2"]) == ("scan", both)
    assert read(0, ["1"]) == ("scan", Counter([("fig", 1), ("kiwi", 2)]))
    assert read(0, ["0"]) == ("scan", Counter())  # 0: scans always, even of no rows
    assert read(1, ["2"], deferred=True) == ("local", Counter([("late", 30)]))
    assert Warehouse(spark, str(tmp_path), "c", 9).read_stored("r", struct, ["3"]) is None
    program = compile_corpus(CORPUS, "sensors.pomo")  # a run's warehouse takes its policy's
    prepared = prepare(program, events_file, EPOCH, 0, EPOCH * EPOCHS, window=ANY_TIME)
    for bound in (0, 7):
        driver = Driver.for_run(program, prepared, str(tmp_path / "run"), Policy(plan_rows=bound))
        assert driver.backend.wh.plan_rows == bound
