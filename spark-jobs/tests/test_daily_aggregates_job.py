"""The batch job writes per-key daily aggregates to Parquet, partitioned by day."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

JOBS = Path(__file__).resolve().parents[1] / "jobs"


def test_daily_aggregates(spark: Any, broker: str, topic_name: str, helpers: Any,
                          tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("strom_jobs_daily", JOBS / "daily_aggregates.py")
    assert spec is not None and spec.loader is not None
    job = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = job
    spec.loader.exec_module(job)

    helpers.create_topic(broker, topic_name, 2)
    day1, day2 = 1_700_006_400_000, 1_700_092_800_000  # 2023-11-15 / 16 00:00 UTC
    for ts, temps in ((day1, [10.0, 20.0, 30.0]), (day2, [5.0])):
        for i, t in enumerate(temps):
            helpers.produce(broker, topic_name, [(b"s1", b'{"temperature": %.1f}' % t)],
                            timestamp_ms=ts + i * 1000)
    helpers.produce(broker, topic_name, [(b"s2", b'{"temperature": 1.0}')], timestamp_ms=day1)

    args = job.parse_args(["--bootstrap", broker, "--topic", topic_name, "--out",
                           str(tmp_path / "daily"), "--value-field", "temperature"])
    job.run(spark, args)
    rows = {(str(r.day), r.key): r for r in spark.read.parquet(str(tmp_path / "daily")).collect()}
    assert set(rows) == {("2023-11-15", "s1"), ("2023-11-15", "s2"), ("2023-11-16", "s1")}
    s1 = rows[("2023-11-15", "s1")]
    assert (s1.records, s1.min_temperature, s1.avg_temperature, s1.max_temperature) == (
        3, 10.0, 20.0, 30.0)
    assert sorted(p.name for p in (tmp_path / "daily").iterdir() if p.is_dir()) == [
        "day=2023-11-15", "day=2023-11-16"]
