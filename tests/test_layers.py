"""The package's layers, checked by walking its imports (import-linter's contracts in
pyproject.toml): the CLI, the Dagster layer and the Airflow layer (neither importing the
other's orchestrator) over the engine's driver, the engine over the
plan, the plan over the language; no import cycle; the language and the plan free of Spark,
pandas and Dagster; the reference evaluator free of the plan's evaluation code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), "--no-cache", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_every_layer_contract_is_kept() -> None:
    done = _lint()
    assert done.returncode == 0, done.stdout + done.stderr
    contracts = (
        "layers",
        "driver-api",
        "one-orchestrator",
        "no-airflow-in-dagster",
        "pure-plan",
        "independent-reference",
        "local-executor",
        "closed-plan",
        "no-cycles",
    )
    for contract in contracts:
        assert f'id = "{contract}"' in (ROOT / "pyproject.toml").read_text()
    assert f"{len(contracts)} kept, 0 broken" in done.stdout, done.stdout


def test_a_broken_layer_is_reported(tmp_path: Path) -> None:
    """The check has teeth: a contract the code does not keep (the Spark backend importing
    no Spark) is reported broken, with the import that breaks it."""
    config = tmp_path / "contracts.toml"
    config.write_text(
        "[tool.importlinter]\n"
        'root_package = "dagster_pomo"\n'
        "include_external_packages = true\n"
        "[[tool.importlinter.contracts]]\n"
        'name = "no spark in the backend"\n'
        'type = "forbidden"\n'
        'source_modules = ["dagster_pomo.engine.spark.rule_frames"]\n'
        'forbidden_modules = ["pyspark"]\n'
    )
    done = _lint(str(config))
    assert done.returncode == 1
    assert (
        "BROKEN" in done.stdout
        and "dagster_pomo.engine.spark.rule_frames -> pyspark" in done.stdout
    )


def test_what_the_driver_hands_out_is_no_spark_type() -> None:
    """Callers of the driver (the Dagster and Airflow layers, the CLI, the pipeline's steps)
    read a warehouse through `StoredResults` and learn what an inputs step stored from
    `StoredLanding`, both defined outside the Spark backend, which provides them."""
    import inspect

    from dagster_pomo.engine import driver, stored
    from dagster_pomo.engine.spark.results import Results

    assert isinstance(Results(None, {}), stored.StoredResults)  # type: ignore[arg-type]
    hints = inspect.get_annotations(driver.Driver.__init__) | inspect.get_annotations(
        driver.Driver.store_landing
    )
    assert hints["results"] == "StoredResults" and hints["return"] == "StoredLanding"
    assert stored.StoredLanding.__module__ == "dagster_pomo.engine.stored"
