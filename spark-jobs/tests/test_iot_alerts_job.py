"""The IoT streaming job raises exactly the alerts the generated readings call for."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

JOBS = Path(__file__).resolve().parents[1] / "jobs"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"strom_jobs_{name}", JOBS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_iot_job_flags_hot_and_shaky_sensors(spark: Any, broker: str, topic_name: str,
                                             helpers: Any, tmp_path: Path) -> None:
    gen, job = _load("generate_readings"), _load("iot_alerts")
    readings_topic, alerts_topic = f"{topic_name}-readings", f"{topic_name}-alerts"
    helpers.create_topic(broker, readings_topic, 2)
    helpers.create_topic(broker, alerts_topic, 1)
    start = 1_700_000_000_000
    readings = list(gen.generate(sensors=8, seconds=60, per_second=2, start_ms=start,
                                 hot={"s001": [1], "s004": [3, 4]}, shaky={"s002": [2]}))
    # one late-arriving normal reading that moves the watermark past every window above
    readings.append(gen.Reading("s000", "train-0", start + 120_000, 50.0, 1.0))
    assert gen.publish(broker, readings_topic, iter(readings)) == len(readings)

    args = job.parse_args([
        "--bootstrap", broker, "--readings-topic", readings_topic, "--alerts-topic",
        alerts_topic, "--checkpoint", str(tmp_path / "cp"), "--starting-offsets", "earliest",
        "--available-now"])
    query = job.start_query(spark, args)
    query.awaitTermination(180)
    assert not query.isActive and query.exception() is None

    # what the job must say, computed directly from the readings
    watermark = max(r.ts for r in readings) - 20_000
    windows: dict[tuple[str, int], list[Any]] = defaultdict(list)
    for r in readings:
        windows[(r.sensor_id, r.ts - r.ts % 10_000)].append(r)
    expected = {}
    for (sensor, w), rs in windows.items():
        reasons = [name for name, hit in (
            ("temperature", max(r.temperature for r in rs) > args.temperature_threshold),
            ("vibration", max(r.vibration for r in rs) > args.vibration_threshold)) if hit]
        if reasons and w + 10_000 <= watermark:
            expected[(sensor, (w - start) // 10_000)] = (reasons, len(rs))
    assert set(expected) == {("s001", 1), ("s004", 3), ("s004", 4), ("s002", 2)}

    got = {}
    for rec in helpers.consume_all(broker, alerts_topic):
        alert = json.loads(rec.value)
        assert rec.key == alert["sensor_id"].encode()
        assert alert["train_id"] == f"train-{int(alert['sensor_id'][1:]) % 3}"
        from datetime import datetime

        w = int(datetime.fromisoformat(alert["window_start"].replace("Z", "+00:00")).timestamp()
                * 1000)
        got[(alert["sensor_id"], (w - start) // 10_000)] = (alert["reasons"], alert["readings"])
    assert got == expected
