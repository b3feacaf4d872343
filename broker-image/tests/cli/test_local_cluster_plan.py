"""Planning, recording and stopping a local cluster, without starting brokers."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from strom.cli import localcluster as lc
from strom.cli.errors import CliError, UsageError
from strom.testing import process
from strom.testing.process import ManagedProcess


def always_free(host: str, port: int) -> bool:
    return True


def test_plan_uses_the_default_ports_when_free(tmp_path: Path) -> None:
    state = lc.plan_cluster(tmp_path / "d", 1, is_free=always_free)
    (b,) = state.brokers
    assert (b.broker_id, b.host, b.port, b.metrics_port) == (0, "127.0.0.1", 9092, 9404)
    assert state.bootstrap == "127.0.0.1:9092"
    assert Path(b.dir) == (tmp_path / "d" / "broker-0").resolve()
    assert b.log_file.name == "broker.log" and b.pid_file.name == "broker.pid"
    assert b.kafka_port == 19092 and state.kafka_bootstrap == "127.0.0.1:19092"
    assert b.config()["listeners"] == "PLAINTEXT://127.0.0.1:19092"


def test_every_broker_gets_its_own_kafka_listener_port(tmp_path: Path) -> None:
    # Found when the Kafka listener landed: it defaults to :19092 on every broker, so the second
    # broker of `strom dev up --brokers 3` exited with "Address already in use".
    for base in (9092, 0):
        state = lc.plan_cluster(tmp_path / f"d{base}", 3, base_port=base)
        ports = [p for b in state.brokers for p in (b.port, b.metrics_port, b.kafka_port)]
        assert len(set(ports)) == 9 and 0 not in ports
        listeners = {b.config()["listeners"] for b in state.brokers}
        assert len(listeners) == 3


def test_pick_ports_takes_random_free_ports_when_the_defaults_are_busy() -> None:
    ports = lc.pick_ports(3, 9092, is_free=lambda h, p: p != 9093)
    assert ports[0] == 9092 and ports[2] == 9094
    assert ports[1] not in (9092, 9093, 9094)
    assert len(set(ports)) == 3
    assert 9092 not in lc.pick_ports(1, 9092, taken={9092}, is_free=always_free)


def test_broker_count_limits() -> None:
    lc.check_broker_count(lc.MAX_BROKERS)
    with pytest.raises(UsageError, match=r"--brokers 10: a local cluster has at most 9"):
        lc.check_broker_count(10)
    with pytest.raises(UsageError):
        lc.check_broker_count(0)


def test_planning_n_brokers_puts_the_first_three_in_the_quorum(tmp_path: Path) -> None:
    state = lc.plan_cluster(tmp_path, 4, is_free=always_free)
    assert [b.port for b in state.brokers] == [9092, 9093, 9094, 9095]
    assert [b.metrics_port for b in state.brokers] == [9404, 9405, 9406, 9407]
    assert state.bootstrap == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094,127.0.0.1:9095"
    assert len({b.dir for b in state.brokers}) == 4
    assert state.voters == [0, 1, 2]
    assert state.cluster_config == {
        "controller.quorum.voters": "0@127.0.0.1:9092,1@127.0.0.1:9093,2@127.0.0.1:9094",
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
    }


@pytest.mark.parametrize("n, rf, min_isr", [(2, "2", "1"), (3, "3", "2"), (9, "3", "2")])
def test_replication_defaults_follow_the_broker_count(tmp_path: Path, n: int, rf: str,
                                                      min_isr: str) -> None:
    state = lc.plan_cluster(tmp_path, n, base_port=0)
    assert state.cluster_config["default.replication.factor"] == rf
    assert state.cluster_config["min.insync.replicas"] == min_isr
    assert len(state.voters) == min(n, 3)
    ports = [b.port for b in state.brokers] + [b.metrics_port for b in state.brokers]
    assert len(set(ports)) == 2 * n
    voters = state.cluster_config["controller.quorum.voters"].split(",")
    assert voters == [f"{b.broker_id}@127.0.0.1:{b.port}" for b in state.brokers[:min(n, 3)]]


def test_one_broker_is_its_own_controller(tmp_path: Path) -> None:
    state = lc.plan_cluster(tmp_path, 1, is_free=always_free)
    # no voters configured (it votes alone, on its own port), but recorded as the voter
    assert state.cluster_config == {} and state.voters == [0]
    assert [s.voter for s in lc.cluster_status(state)] == [True]


def test_a_data_dir_keeps_its_voters_when_started_with_more_brokers(tmp_path: Path) -> None:
    assert lc.load_layout(tmp_path) is None
    one = lc.plan_cluster(tmp_path, 1, is_free=always_free)
    lc.save_layout(one)
    layout = lc.load_layout(tmp_path)
    assert layout == lc.Layout(1, [0])
    five = lc.plan_cluster(tmp_path, 5, is_free=always_free, voters=layout.voters)
    assert five.voters == [0]
    assert five.cluster_config["controller.quorum.voters"] == "0@127.0.0.1:9092"
    assert five.cluster_config["min.insync.replicas"] == "2"
    lc.check_restart(layout, 5, tmp_path)
    lc.save_layout(five)
    with pytest.raises(UsageError, match=r"--brokers 3: .* holds a 5-broker cluster \(controller "
                       r"voters 0\); start it with --brokers 5 or more"):
        lc.check_restart(lc.Layout(5, [0]), 3, tmp_path)


def test_older_data_dirs_imply_their_layout_from_the_metadata_logs(tmp_path: Path) -> None:
    for i in range(2):
        (tmp_path / f"broker-{i}" / "data" / lc.RAFT_DIR).mkdir(parents=True)
    assert lc.load_layout(tmp_path) == lc.Layout(2, [0, 1])
    (tmp_path / lc.LAYOUT_FILE).write_text("{not json")
    with pytest.raises(CliError, match=r"layout\.json is not a valid layout record"):
        lc.load_layout(tmp_path)


def test_user_overrides_win_over_cluster_defaults_but_not_over_the_quorum(tmp_path: Path) -> None:
    state = lc.plan_cluster(tmp_path, 3, is_free=always_free)
    argv = lc.broker_command(state.brokers[1], {"min.insync.replicas": "1",
                                                "controller.quorum.voters": "9@x:1"},
                             state.cluster_config)
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    assert "min.insync.replicas=1" in sets and "default.replication.factor=3" in sets
    assert ("controller.quorum.voters=0@127.0.0.1:9092,1@127.0.0.1:9093,2@127.0.0.1:9094"
            in sets)
    assert "broker.id=1" in sets and "port=9093" in sets


def test_old_cluster_records_without_cluster_keys_still_load(tmp_path: Path) -> None:
    state = lc.plan_cluster(tmp_path, 1, is_free=always_free)
    raw = json.loads(state.to_json())
    del raw["cluster_config"], raw["voters"]
    (tmp_path / "cluster.json").write_text(json.dumps(raw))
    loaded = lc.load_state(tmp_path)
    assert loaded is not None and loaded.cluster_config == {} and loaded.voters == []


def test_broker_command_sets_the_cluster_keys_over_user_overrides(tmp_path: Path) -> None:
    (b,) = lc.plan_cluster(tmp_path, 1, is_free=always_free).brokers
    argv = lc.broker_command(b, {"num.partitions": "3", "port": "1"})
    assert argv[:3] == [sys.executable, "-m", "strom.broker"]
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    assert "num.partitions=3" in sets
    assert "port=9092" in sets and "port=1" not in sets
    assert f"log.dirs={b.data_dir}" in sets


def test_state_round_trips_through_cluster_json(tmp_path: Path) -> None:
    state = lc.plan_cluster(tmp_path, 1, is_free=always_free)
    state.brokers[0].pid = 1234
    state.overrides = {"a": "b"}
    lc.save_state(state)
    raw = json.loads((tmp_path / "cluster.json").read_text())
    assert raw["brokers"][0]["pid"] == 1234
    loaded = lc.load_state(tmp_path)
    assert loaded == state
    assert lc.load_state(tmp_path / "nothing") is None


def test_a_damaged_cluster_json_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text("{not json")
    with pytest.raises(CliError, match="not a valid cluster record"):
        lc.load_state(tmp_path)


def test_the_data_dir_lock_admits_one_command_at_a_time(tmp_path: Path) -> None:
    # flock is per open file description: a second open in the same process conflicts too
    with (lc.locked(tmp_path), pytest.raises(CliError, match="another strom dev command"),
          lc.locked(tmp_path)):
        pass
    with lc.locked(tmp_path):
        pass


def fake_broker(ignore_term: bool) -> subprocess.Popen[bytes]:
    """A process whose command line mentions strom.broker, optionally ignoring SIGTERM."""
    code = "import signal, time\n"
    if ignore_term:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "print('up', flush=True)\ntime.sleep(60)\n"
    proc = subprocess.Popen([sys.executable, "-c", code, "strom.broker"], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"up\n"  # signal handlers are installed
    return proc


@pytest.mark.parametrize("ignore_term,outcome", [(False, "stopped"), (True, "killed")])
@pytest.mark.integration  # starts a process
def test_stop_sends_sigterm_then_sigkill(tmp_path: Path, ignore_term: bool, outcome: str) -> None:
    proc = fake_broker(ignore_term)
    try:
        state = lc.plan_cluster(tmp_path, 1, is_free=always_free)
        state.brokers[0].pid = proc.pid
        assert lc.is_our_broker(proc.pid)
        process._CHILDREN[proc.pid] = proc  # reaped like brokers this process spawned
        started = time.monotonic()
        (result,) = lc.stop_cluster(state, timeout=1.0)
        assert result.outcome == outcome
        assert time.monotonic() - started < 10
        assert not lc.pid_alive(proc.pid)
        expected = -signal.SIGKILL if ignore_term else -signal.SIGTERM
        assert proc.wait(5) == expected
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.integration  # starts a process
def test_stop_never_signals_a_pid_that_is_not_a_broker(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        state = lc.plan_cluster(tmp_path, 1, is_free=always_free)
        state.brokers[0].pid = proc.pid
        assert not lc.is_our_broker(proc.pid)
        (result,) = lc.stop_cluster(state, timeout=0.5)
        assert result.outcome == "not running"
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.integration  # starts a process
def test_pid_alive() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not lc.pid_alive(proc.pid) or not lc.is_our_broker(proc.pid)
    assert not lc.pid_alive(None)
    assert not lc.pid_alive(0)
    import os

    assert lc.pid_alive(os.getpid())


@pytest.mark.integration  # starts a process
def test_wait_ready_fails_fast_with_the_last_log_line_when_a_broker_dies(tmp_path: Path) -> None:
    state = lc.plan_cluster(tmp_path, 1, is_free=always_free)
    b = state.brokers[0]
    Path(b.dir).mkdir(parents=True)
    dying = ManagedProcess(
        [sys.executable, "-c", "print('starting'); print('ConfigError: port=x is not an integer')"],
        b.log_file, name="broker 0").start()
    started = time.monotonic()
    with pytest.raises(CliError, match="exited during start-up: ConfigError: port=x"):
        lc.wait_ready(state, [dying], timeout=30)
    assert time.monotonic() - started < 10


def test_status_of_a_recorded_cluster_that_is_not_running(tmp_path: Path) -> None:
    state = lc.plan_cluster(tmp_path, 1, is_free=always_free)
    lc.save_state(state)
    (status,) = lc.cluster_status(state)
    assert not status.alive and not status.ready
    assert lc.running_state(tmp_path) is None
