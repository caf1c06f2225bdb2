"""`dagster dev -w workspace.yaml` can load every example code location."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, RULES

DAGSTER = Path(sys.executable).with_name("dagster")


def test_every_example_corpus_loads_as_a_code_location(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "POMO_WAREHOUSE": str(tmp_path / "wh"),
        "POMO_LANDING": str(tmp_path / "landing"),
        "DAGSTER_HOME": str(tmp_path),
    }
    result = subprocess.run(
        [str(DAGSTER), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for corpus in sorted(p.stem for p in RULES.glob("*.pomo")):
        assert f"Validation successful for code location {corpus}." in output, corpus
