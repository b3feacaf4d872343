"""The pure reassignment planner: minimal movement, even spread, racks, leaders, the file."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from strom.client.reassign_plan import (
    moved_replicas,
    parse_plan,
    plan_reassignment,
    plan_to_json,
)
from strom.protocol.errors import ErrorCode, StromError


def rotated(topic: str, partitions: int, brokers: list[int], rf: int) -> dict[tuple[str, int],
                                                                                list[int]]:
    n = len(brokers)
    return {(topic, p): [brokers[(p + i) % n] for i in range(rf)] for p in range(partitions)}


def loads(plan: dict[tuple[str, int], list[int]]) -> Counter[int]:
    return Counter(b for replicas in plan.values() for b in replicas)


def test_0_1_2_to_2_3_4_keeps_2_and_moves_the_rest_evenly() -> None:
    current = rotated("a", 6, [0, 1, 2], 3)
    plan = plan_reassignment(current, [2, 3, 4])
    for key, replicas in plan.items():
        assert sorted(replicas) == [2, 3, 4], key
    # every replica on broker 2 stays, the 12 on 0 and 1 move: nothing more
    assert moved_replicas(current, plan) == 12
    leaders = Counter(r[0] for r in plan.values())
    assert sorted(leaders.values()) == [2, 2, 2]


def test_rf1_partitions_spread_evenly_and_stay_where_allowed() -> None:
    current = {("t", p): [0] for p in range(8)}
    plan = plan_reassignment(current, [0, 1, 2, 3])
    assert sorted(loads(plan).values()) == [2, 2, 2, 2]
    assert sum(1 for r in plan.values() if r == [0]) == 2  # two stay on 0, six move
    assert moved_replicas(current, plan) == 6


def test_adding_a_broker_moves_only_its_share() -> None:
    current = rotated("t", 12, [0, 1, 2], 2)
    plan = plan_reassignment(current, [0, 1, 2, 3])
    assert sorted(loads(plan).values()) == [6, 6, 6, 6]
    assert moved_replicas(current, plan) == 6
    assert all(len(set(r)) == 2 for r in plan.values())


def test_no_change_needed_is_a_no_op() -> None:
    current = rotated("t", 6, [0, 1, 2], 3)
    assert plan_reassignment(current, [0, 1, 2]) == current


def test_increasing_the_replication_factor_keeps_existing_replicas() -> None:
    current = {("t", p): [p % 3] for p in range(3)}
    plan = plan_reassignment(current, [0, 1, 2], replication_factor=3)
    for (_, p), replicas in plan.items():
        assert replicas[0] == p % 3 and sorted(replicas) == [0, 1, 2]


def test_rack_aware_when_racks_are_known() -> None:
    current = {("t", p): [0] for p in range(4)}
    racks = {0: "a", 1: "a", 2: "b", 3: "b"}
    plan = plan_reassignment(current, [0, 1, 2, 3], racks=racks, replication_factor=2)
    for key, replicas in plan.items():
        assert {racks[b] for b in replicas} == {"a", "b"}, (key, replicas)
    assert sorted(loads(plan).values()) == [2, 2, 2, 2]


def test_leaders_spread_when_the_old_leader_goes() -> None:
    current = {("t", p): [0, 1] for p in range(4)}
    plan = plan_reassignment(current, [1, 2, 3, 4])
    leaders = Counter(r[0] for r in plan.values())
    assert max(leaders.values()) == 1
    assert sorted(loads(plan).values()) == [2, 2, 2, 2]


def test_deterministic() -> None:
    current = rotated("a", 7, [0, 1, 2], 2) | rotated("b", 5, [1, 2, 3], 3)
    assert plan_reassignment(current, [1, 2, 3, 4]) == plan_reassignment(current, [4, 3, 2, 1])


def test_too_few_brokers_names_the_partition_and_the_fix() -> None:
    with pytest.raises(StromError) as info:
        plan_reassignment({("t", 0): [0, 1, 2]}, [0, 1])
    assert info.value.code is ErrorCode.INVALID_REQUEST
    assert "t-0" in info.value.message and "add brokers" in info.value.message
    with pytest.raises(StromError):
        plan_reassignment({("t", 0): [0]}, [])
    with pytest.raises(StromError):
        plan_reassignment({("t", 0): [0]}, [0], replication_factor=0)


def test_plan_file_round_trip_in_kafkas_format() -> None:
    plan = {("b", 0): [3, 4], ("a", 1): [2, 3]}
    data = plan_to_json(plan)
    assert data == {"version": 1, "partitions": [
        {"topic": "a", "partition": 1, "replicas": [2, 3]},
        {"topic": "b", "partition": 0, "replicas": [3, 4]}]}
    assert parse_plan(json.dumps(data)) == plan


@pytest.mark.parametrize("text, fragment", [
    ("not json", "not JSON"),
    ('{"version": 1}', '"partitions"'),
    ('{"version": 2, "partitions": []}', "version"),
    ('{"partitions": [{"partition": 0, "replicas": [1]}]}', "no topic"),
    ('{"partitions": [{"topic": "t", "partition": -1, "replicas": [1]}]}', "partition number"),
    ('{"partitions": [{"topic": "t", "partition": 0}]}', "no replicas"),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}', "non-empty"),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 1]}]}', "twice"),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1]},'
     ' {"topic": "t", "partition": 0, "replicas": [2]}]}', "repeats"),
])
def test_bad_plan_files(text: str, fragment: str) -> None:
    with pytest.raises(StromError) as info:
        parse_plan(text, "plan.json")
    assert fragment in info.value.message and "plan.json" in info.value.message


@pytest.mark.parametrize("seed", range(40))
def test_random_plans_are_valid_and_balanced(seed: int) -> None:
    import random

    rnd = random.Random(seed)
    old = list(range(rnd.randint(1, 5)))
    new = sorted(rnd.sample(range(8), rnd.randint(3, 6)))
    rf = rnd.randint(1, min(len(old), 3))
    current = rotated("x", rnd.randint(1, 20), old, rf)
    plan = plan_reassignment(current, new)
    for key, replicas in plan.items():
        assert len(replicas) == rf and len(set(replicas)) == rf, key
        assert set(replicas) <= set(new), key
    counts = [loads(plan).get(b, 0) for b in new]
    assert max(counts) - min(counts) <= 1, (current, new, plan)
    # minimal movement: each target broker keeps as many of its replicas as its share allows
    floor = sum(counts) // len(new)
    before = loads(current)
    kept = sum(len(set(plan[k]) & set(current[k])) for k in plan)
    assert kept >= sum(min(before.get(b, 0), floor) for b in new), (current, new, plan)


def test_raise_replication_grows_only_the_small_partitions() -> None:
    from strom.client.reassign_plan import OFFSETS_TOPIC, raise_replication
    from strom.groups.offsets import OFFSETS_TOPIC as BROKER_OFFSETS_TOPIC

    assert OFFSETS_TOPIC == BROKER_OFFSETS_TOPIC
    current = {("__consumer_offsets", p): [0] for p in range(10)}
    current[("__consumer_offsets", 9)] = [1, 2, 3]
    plan = raise_replication(current, range(5), 3)
    assert sorted(plan) == [("__consumer_offsets", p) for p in range(9)]
    for k, replicas in plan.items():  # every current replica stays, the leader first
        assert replicas[0] == current[k][0] and len(set(replicas)) == 3
        assert set(replicas) <= set(range(5))
    added = [sum(b in r[1:] for r in plan.values()) for b in range(1, 5)]
    assert max(added) - min(added) <= 2, added  # spread over the new brokers
    assert all(len(r) == 2 for r in raise_replication(current, [0, 1], 3).values())
    assert raise_replication({("t", 0): [0, 1, 2]}, range(5), 3) == {}
