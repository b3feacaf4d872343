"""``strom group`` in-process against a fake Admin: flags, tables, JSON, errors, exit codes.

The real-broker runs are in ``e2e/test_consumer_groups.py``; here the Admin is a stand-in that
records calls, so flag parsing and rendering are checked without a cluster.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from strom.cli import group as group_cmd
from strom.cli.errors import UsageError
from strom.cli.main import main
from strom.client.models import (
    GroupDescription,
    GroupListing,
    GroupMemberDescription,
    GroupPartitionLag,
    OffsetReset,
    TopicPartition,
)
from strom.protocol.errors import ErrorCode, StromError

TP = TopicPartition


class FakeAdmin:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.groups = {
            "busy": GroupDescription(
                "busy", "Stable", "consumer", "range", 4, "m-1", coordinator=2, members=[
                    GroupMemberDescription("m-1", "c1", "static-1", None, ["t"], [TP("t", 0)]),
                    GroupMemberDescription("m-2", "c2", None, None, ["t"], [TP("t", 1)])]),
            "idle": GroupDescription("idle", "Empty", "consumer", "", 7, coordinator=1),
        }

    def list_groups(self, states: list[str] | None = None) -> list[GroupListing]:
        self.calls.append(("list_groups", states))
        return [GroupListing(g, d.state, "consumer", d.coordinator)
                for g, d in sorted(self.groups.items())
                if not states or d.state in states]

    def describe_groups(self, ids: list[str]) -> list[GroupDescription]:
        return [self.groups.get(g, GroupDescription(g, "Dead")) for g in ids]

    def group_lag(self, group: str) -> list[GroupPartitionLag]:
        if group == "busy":
            return [GroupPartitionLag("t", 0, 5, 0, 9, "m-1", "c1"),
                    GroupPartitionLag("t", 1, None, 2, 4, "m-2", "c2")]
        return [GroupPartitionLag("t", 0, 3, 0, 3)]

    def list_group_offsets(self, group: str) -> dict[TopicPartition, int]:
        return {TP("t", 0): 3, TP("u", 1): 1} if group == "idle" else {}

    def reset_group_offsets(self, group: str, topics: list[Any], spec: str, *,
                            dry_run: bool) -> dict[TopicPartition, int]:
        self.calls.append(("reset", group, topics, spec, dry_run))
        OffsetReset.parse(spec)  # the CLI must hand over a spec the Admin accepts
        out: dict[TopicPartition, int] = {}
        for t in topics:
            for tp in ([TP(t, 0), TP(t, 1)] if isinstance(t, str) else [TP(*t)]):
                out[tp] = 0
        return out

    def delete_groups(self, ids: list[str], *, raise_on_error: bool
                      ) -> dict[str, StromError | None]:
        self.calls.append(("delete", ids))
        return {g: (None if g == "idle" else
                    StromError(ErrorCode.NON_EMPTY_GROUP, "the group has members")
                    if g == "busy" else StromError(ErrorCode.GROUP_ID_NOT_FOUND, "no such group"))
                for g in ids}


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> FakeAdmin:
    fake = FakeAdmin()

    @contextlib.contextmanager
    def open_admin(args: Any) -> Iterator[FakeAdmin]:
        yield fake

    monkeypatch.setattr(group_cmd, "open_admin", open_admin)
    return fake


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["group", *argv])
    except SystemExit as exit_:  # argparse's own usage errors
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_list(admin: FakeAdmin, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list")
    assert code == 0
    assert [line.split() for line in out.splitlines()] == [
        ["GROUP", "STATE", "COORDINATOR"], ["busy", "Stable", "2"], ["idle", "Empty", "1"]]
    code, out, _ = run(capsys, "list", "--state", "Empty", "-o", "json")
    assert json.loads(out) == [{"group": "idle", "state": "Empty", "coordinator": 1}]
    assert admin.calls[-1] == ("list_groups", ["Empty"])


def test_describe_offsets_is_kafkas_table(admin: FakeAdmin,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "describe", "busy")
    assert code == 0 and err == ""
    lines = [line.split() for line in out.splitlines()]
    assert lines[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                        "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert lines[1] == ["busy", "t", "0", "5", "9", "4", "m-1", "-", "c1"]
    assert lines[2] == ["busy", "t", "1", "-", "4", "2", "m-2", "-", "c2"]  # lag from start 2

    code, out, err = run(capsys, "describe", "idle", "-o", "json")
    assert code == 0 and err == ""  # notes only with the table
    assert json.loads(out) == [{"group": "idle", "topic": "t", "partition": 0,
                                "current_offset": 3, "log_end_offset": 3, "lag": 0,
                                "consumer_id": None, "host": None, "client_id": None}]
    code, out, err = run(capsys, "describe", "idle")
    assert "has no active members" in err
    admin.groups["busy"] = GroupDescription("busy", "PreparingRebalance", members=[
        GroupMemberDescription("m-1", "c1")])
    code, out, err = run(capsys, "describe", "busy", "--state")
    assert code == 0 and "Warning: consumer group 'busy' is rebalancing." in err


def test_describe_members_and_state(admin: FakeAdmin,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "describe", "busy", "--members", "-o", "yaml")
    assert code == 0
    assert "group_instance_id: static-1" in out and "- t-0" in out
    code, out, _ = run(capsys, "describe", "busy", "--members")
    assert out.splitlines()[0].split() == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST",
                                           "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    code, out, _ = run(capsys, "describe", "busy", "idle", "--state", "-o", "json")
    assert [(r["group"], r["state"], r["generation"], r["members"], r["coordinator"])
            for r in json.loads(out)] == [("busy", "Stable", 4, 2, 2), ("idle", "Empty", 7, 0, 1)]


def test_describe_unknown_group_is_an_error(admin: FakeAdmin,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "describe", "ghost")
    assert code == 1 and out == ""
    assert err.strip() == ("strom: error: consumer group 'ghost' does not exist "
                           "(see: strom group list)")


@pytest.mark.parametrize(("flags", "spec"), [
    (["--to-earliest"], "earliest"),
    (["--to-latest"], "latest"),
    (["--to-offset", "12"], "offset:12"),
    (["--shift-by", "-3"], "shift:-3"),
    (["--to-datetime", "2024-05-01T00:00:00Z"], "datetime:1714521600000"),
    (["--to-datetime", "1714521600000"], "datetime:1714521600000"),
])
def test_reset_scenarios_are_dry_runs_by_default(
        admin: FakeAdmin, capsys: pytest.CaptureFixture[str], flags: list[str],
        spec: str) -> None:
    code, out, err = run(capsys, "reset-offsets", "idle", "--topic", "t", *flags)
    assert code == 0, err
    assert admin.calls[-1] == ("reset", "idle", ["t"], spec, True)
    assert out.splitlines()[0].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert "Dry run" in err and "--execute" in err


def test_by_duration_counts_back_from_now(admin: FakeAdmin,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert group_cmd.parse_duration_ms("PT30M") == 1_800_000
    assert group_cmd.parse_duration_ms("p1dt1h1m1.5s") == 90_061_500
    for bad in ("P", "PT", "30M", "PT0S", "P1H"):
        with pytest.raises(UsageError):
            group_cmd.parse_duration_ms(bad)
    before = int(time.time() * 1000)
    code, _, err = run(capsys, "reset-offsets", "idle", "--topic", "t", "--by-duration", "PT1H")
    after = int(time.time() * 1000)
    assert code == 0, err
    spec = admin.calls[-1][3]
    assert spec.startswith("datetime:")
    assert before - 3_600_000 <= int(spec.split(":")[1]) <= after - 3_600_000


def test_reset_execute_partitions_and_all_topics(
        admin: FakeAdmin, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "reset-offsets", "idle", "--topic", "t:0,2", "--topic", "u",
                         "--to-latest", "--execute", "-o", "json")
    assert code == 0 and err == ""
    assert admin.calls[-1] == ("reset", "idle", [("t", 0), ("t", 2), "u"], "latest", False)
    assert [(r["topic"], r["partition"]) for r in json.loads(out)] == [
        ("t", 0), ("t", 2), ("u", 0), ("u", 1)]
    code, _, _ = run(capsys, "reset-offsets", "idle", "--all-topics", "--to-earliest",
                     "--execute")
    assert code == 0 and admin.calls[-1] == ("reset", "idle", ["t", "u"], "earliest", False)


@pytest.mark.parametrize(("argv", "message"), [
    (["--topic", "t"], "one of the arguments --to-earliest"),
    (["--to-earliest"], "one of the arguments --topic --all-topics is required"),
    (["--topic", "t", "--to-earliest", "--to-latest"], "not allowed with argument"),
    (["--topic", "t:x", "--to-earliest"], "partitions must be numbers"),
    (["--topic", "t", "--to-offset", "-1"], "--to-offset -1 must be >= 0"),
    (["--topic", "t", "--to-datetime", "tomorrow"], "--to-datetime 'tomorrow'"),
    (["--topic", "t", "--to-datetime", "earliest"], "use --to-earliest"),
    (["--topic", "t", "--to-earliest", "--execute", "--dry-run"], "not allowed with"),
    (["--topic", "t", "--by-duration", "1h"], "--by-duration '1h' is not an ISO-8601"),
])
def test_reset_usage_errors(admin: FakeAdmin, capsys: pytest.CaptureFixture[str],
                            argv: list[str], message: str) -> None:
    code, out, err = run(capsys, "reset-offsets", "idle", *argv)
    assert code == 2 and out == ""
    assert err.startswith("strom: error:") and message in err and len(err.splitlines()) == 1


def test_reset_refused_by_the_admin_is_one_line(
        admin: FakeAdmin, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise StromError(ErrorCode.NON_EMPTY_GROUP, "group 'busy' is Stable with 2 member(s); "
                         "see 'strom group describe busy --members'")

    monkeypatch.setattr(admin, "reset_group_offsets", refuse)
    code, out, err = run(capsys, "reset-offsets", "busy", "--topic", "t", "--to-earliest")
    assert code == 1 and out == ""
    assert err.startswith("strom: error: NON_EMPTY_GROUP: group 'busy' is Stable")


def test_delete(admin: FakeAdmin, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "delete", "idle")
    assert (code, out, err) == (0, "Deleted consumer group(s): 'idle'\n", "")
    code, out, err = run(capsys, "delete", "idle", "busy", "ghost")
    assert code == 1
    assert out == "Deleted consumer group(s): 'idle'\n"
    assert len(err.splitlines()) == 1
    assert "group 'busy': NON_EMPTY_GROUP" in err and "strom group describe busy --members" in err
    assert "group 'ghost': GROUP_ID_NOT_FOUND" in err


def test_help_lists_the_group_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["group", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("list", "describe", "reset-offsets", "delete"):
        assert command in out


def test_describe_a_partition_of_a_deleted_topic(admin: FakeAdmin,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin, "group_lag",
                        lambda group: [GroupPartitionLag("gone", 0, 7, -1, -1)])
    code, out, _ = run(capsys, "describe", "idle")
    assert code == 0
    assert out.splitlines()[1].split() == ["idle", "gone", "0", "7", "-", "-", "-", "-", "-"]
