"""Generate train-sensor readings (the IoT example's input) and publish them to a Strom topic.

Each reading is JSON ``{"sensor_id", "train_id", "ts", "temperature", "vibration"}`` with ``ts`` in
ms since the epoch, keyed by sensor id. Deterministic for a seed, so tests can compute the alerts
the job must raise. Some sensors run hot (temperature spikes) or shake (vibration spikes) during
chosen 10-second windows.

    uv run python spark-jobs/jobs/generate_readings.py --bootstrap 127.0.0.1:9092 \\
        --topic sensor-readings --sensors 20 --seconds 120
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass

NORMAL_TEMP = (40.0, 70.0)
NORMAL_VIBRATION = (0.1, 2.0)


@dataclass(frozen=True)
class Reading:
    sensor_id: str
    train_id: str
    ts: int
    temperature: float
    vibration: float

    def to_json(self) -> bytes:
        return json.dumps(
            {"sensor_id": self.sensor_id, "train_id": self.train_id, "ts": self.ts,
             "temperature": self.temperature, "vibration": self.vibration},
            separators=(",", ":"),
        ).encode()


def generate(
    *,
    sensors: int = 10,
    trains: int = 3,
    start_ms: int = 1_700_000_000_000,
    seconds: int = 60,
    per_second: int = 1,
    hot: dict[str, list[int]] | None = None,
    shaky: dict[str, list[int]] | None = None,
    seed: int = 7,
) -> Iterator[Reading]:
    """Readings for ``seconds`` seconds. ``hot``/``shaky``: sensor -> window indexes (10 s each)
    in which that sensor reads 95-105 degrees / vibration 8-10."""
    rnd = random.Random(seed)
    hot = hot or {}
    shaky = shaky or {}
    for second in range(seconds):
        for s in range(sensors):
            sensor = f"s{s:03d}"
            for k in range(per_second):
                ts = start_ms + second * 1000 + k * (1000 // per_second)
                window = (ts - start_ms) // 10_000
                temp = rnd.uniform(*NORMAL_TEMP)
                vib = rnd.uniform(*NORMAL_VIBRATION)
                if window in hot.get(sensor, []):
                    temp = rnd.uniform(95.0, 105.0)
                if window in shaky.get(sensor, []):
                    vib = rnd.uniform(8.0, 10.0)
                yield Reading(sensor, f"train-{s % trains}", ts, round(temp, 2), round(vib, 3))


def publish(bootstrap: str, topic: str, readings: Iterator[Reading]) -> int:
    from strom.client import Producer

    n = 0
    with Producer(bootstrap, acks="all", linger_ms=10) as producer:
        for r in readings:
            producer.send(topic, r.to_json(), r.sensor_id.encode(), timestamp_ms=r.ts)
            n += 1
        producer.flush()
    return n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", default="sensor-readings")
    p.add_argument("--sensors", type=int, default=10)
    p.add_argument("--trains", type=int, default=3)
    p.add_argument("--seconds", type=int, default=60)
    p.add_argument("--per-second", type=int, default=1)
    p.add_argument("--start-ms", type=int, default=None, help="default: now - seconds")
    p.add_argument("--hot", action="append", default=[], metavar="SENSOR:WINDOW",
                   help="make SENSOR overheat in 10-second window WINDOW (repeatable)")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    import time

    # default: the last --seconds seconds, aligned to a 10-second window so --hot is one window
    start = args.start_ms if args.start_ms is not None else (
        (int(time.time() * 1000) - args.seconds * 1000) // 10_000 * 10_000)
    hot: dict[str, list[int]] = {}
    for item in args.hot:
        sensor, _, window = item.partition(":")
        hot.setdefault(sensor, []).append(int(window))
    n = publish(args.bootstrap, args.topic, generate(
        sensors=args.sensors, trains=args.trains, start_ms=start, seconds=args.seconds,
        per_second=args.per_second, hot=hot, seed=args.seed))
    print(f"published {n} readings to {args.topic}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
