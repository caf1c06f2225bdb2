"""What the engine reports about what it evaluated: per stratum, per epoch, per pass."""

from __future__ import annotations

from dataclasses import dataclass, field

from dagster_pomo.timeline import Epoch


@dataclass
class StratumStats:
    index: int
    relations: tuple[str, ...]
    rounds: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    in_process: bool = False  # worked out by this process, not Spark (see `LocalStrata.takes`)


@dataclass
class EpochStats:
    epoch: Epoch
    strata: list[StratumStats] = field(default_factory=list)
    spark_jobs: int | None = 0  # None under Spark Connect, whose clients see no job tracker
    seconds: float = 0.0
    interpreted: bool = False  # whether its plans ran without generated code (`plans_for`)
    # (relation, epoch key) of every stored partition the epoch read: how much state it touched.
    partitions_read: set[tuple[str, str]] = field(default_factory=set)


@dataclass
class EpochScope:
    """What a backend saw of one epoch: its Spark jobs and the stored partitions it read."""

    spark_jobs: int | None = 0
    partitions_read: set[tuple[str, str]] = field(default_factory=set)


@dataclass
class PassStats:
    """What a group of strata made over a range of epochs (see `Driver.evaluate_strata`)."""

    rows: dict[str, int]
    passes: int = 0
    rounds: int = 0  # the most rounds a stratum took
    seconds: float = 0.0
    interpreted: int = 0  # passes whose Spark plans ran without generated code
    in_process: int = 0  # passes worked out wholly in this process
    kept: tuple[str, ...] = ()  # epoch keys not evaluated again (`Driver.evaluate_reached`)

    def count(self, stratum: StratumStats) -> None:
        """Add what one stratum of a pass made."""
        for name, n in stratum.rows.items():
            self.rows[name] = self.rows.get(name, 0) + n
        self.rounds = max(self.rounds, stratum.rounds)
        self.seconds += stratum.seconds

    def passed(self, in_process: bool, interpreted: bool) -> None:
        """Count one pass: worked out wholly in this process, or by Spark's plans (run
        without generated code when ``interpreted``)."""
        self.passes += 1
        self.in_process += in_process
        self.interpreted += interpreted and not in_process

    def __add__(self, other: PassStats) -> PassStats:
        """Both together: a range's strata evaluated group by group, or run after run."""
        rows = dict(self.rows)
        for name, n in other.rows.items():
            rows[name] = rows.get(name, 0) + n
        return PassStats(
            rows,
            self.passes + other.passes,
            max(self.rounds, other.rounds),
            self.seconds + other.seconds,
            self.interpreted + other.interpreted,
            self.in_process + other.in_process,
            (*self.kept, *other.kept),
        )
