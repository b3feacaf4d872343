"""Every failure becomes one ``strom: error:`` line and the right exit code; never a traceback."""

from __future__ import annotations

import argparse
import errno
from pathlib import Path

import grpc
import pytest

from strom.cli import dev
from strom.cli.errors import CliError, UsageError
from strom.cli.main import classify, main
from strom.protocol.errors import ErrorCode, StromError


def test_kafka_error_codes_are_exit_1_with_the_code_name() -> None:
    err = StromError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic 'x' does not exist")
    assert classify(err, None) == (1, "UNKNOWN_TOPIC_OR_PARTITION: topic 'x' does not exist")


def test_an_unreachable_cluster_gets_a_hint_naming_the_address() -> None:
    args = argparse.Namespace(bootstrap_server="10.0.0.1:9092")
    code, message = classify(StromError(ErrorCode.NETWORK_EXCEPTION, "refused"), args)
    assert code == 1
    assert "10.0.0.1:9092" in message and "strom dev up" in message


def test_cli_and_usage_errors_keep_their_exit_codes() -> None:
    assert classify(CliError("boom"), None) == (1, "boom")
    assert classify(UsageError("bad flag"), None) == (2, "bad flag")


class FakeRpcError(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "connection refused"


def test_raw_grpc_errors_are_one_line() -> None:
    code, message = classify(FakeRpcError(), argparse.Namespace(bootstrap_server=None))
    assert code == 1
    assert message.startswith("UNAVAILABLE: connection refused; is a broker running at")


def test_os_errors_name_the_file() -> None:
    err = PermissionError(errno.EACCES, "Permission denied", "/var/lib/strom")
    assert classify(err, None) == (1, "Permission denied: /var/lib/strom")


def test_unexpected_exceptions_point_at_strom_debug() -> None:
    code, message = classify(RuntimeError("oops"), None)
    assert code == 1 and "STROM_DEBUG=1" in message


def boom(args: argparse.Namespace) -> int:
    raise RuntimeError("multi\nline\nmessage")


def interrupt(args: argparse.Namespace) -> int:
    raise KeyboardInterrupt


def patched_parser(monkeypatch: pytest.MonkeyPatch, func: object) -> None:
    """Make ``strom dev status`` run ``func`` (the parser is built inside ``main``)."""
    monkeypatch.setattr(dev, "cmd_status", func)


def test_main_prints_one_line_and_no_traceback(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("STROM_DEBUG", raising=False)
    patched_parser(monkeypatch, boom)
    assert main(["dev", "status", "--data-dir", "/nonexistent"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("strom: error: unexpected RuntimeError: multi line message")


def test_strom_debug_shows_the_traceback(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STROM_DEBUG", "1")
    patched_parser(monkeypatch, boom)
    assert main(["dev", "status"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_ctrl_c_exits_130(monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    patched_parser(monkeypatch, interrupt)
    assert main(["dev", "status"]) == 130
    assert "Traceback" not in capsys.readouterr().err


def test_dev_status_without_a_cluster_is_exit_1_with_the_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dev", "status", "--data-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert "no dev cluster recorded" in err[0] and "strom dev up" in err[0]


def test_dev_down_without_a_cluster_is_a_no_op(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dev", "down", "--data-dir", str(tmp_path)]) == 0
    assert "nothing to stop" in capsys.readouterr().out


def test_too_many_dev_brokers_is_a_usage_error(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dev", "up", "--brokers", "10", "--data-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "strom: error: --brokers 10: a local cluster has at most 9 brokers\n"
    )


def test_an_unreachable_broker_is_exit_1_with_one_line(strom: object) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = strom("topic", "list", "--bootstrap-server", f"127.0.0.1:{port}",  # type: ignore[operator]
                   "--request-timeout-ms", "500", timeout=60)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("strom: error: ")
    assert f"127.0.0.1:{port}" in lines[0]
