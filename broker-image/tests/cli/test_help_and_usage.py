"""``--help`` on every command, ``--version``, and usage errors: exit 2 with one line."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from strom import __version__
from strom.cli.main import build_parser, main


def command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
                  ) -> Iterator[tuple[str, ...]]:
    yield prefix
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from command_paths(sub, (*prefix, name))


ALL_COMMANDS = sorted(command_paths(build_parser()))


def test_the_command_tree_has_every_documented_command() -> None:
    names = {" ".join(p) for p in ALL_COMMANDS}
    for expected in [
        "broker start", "dev up", "dev down", "dev status", "dev demo",
        "topic create", "topic list", "topic describe", "topic delete", "topic alter",
        "topic add-partitions", "produce", "consume", "offsets", "cluster describe",
        "reassign plan", "reassign execute", "reassign status", "reassign cancel",
        "leader elect",
    ]:
        assert expected in names


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=lambda p: " ".join(p) or "strom")
def test_help_exits_0_and_prints_usage(path: tuple[str, ...],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*path, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: strom")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"strom {__version__}"


@pytest.mark.parametrize("argv,fragment", [
    ([], "required: COMMAND"),
    (["nope"], "invalid choice: 'nope'"),
    (["topic"], "required: COMMAND"),
    (["topic", "create"], "required: NAME"),
    (["topic", "create", "t", "--partitions", "x"], "--partitions: invalid int value"),
    (["topic", "create", "t", "--partitions", "0"], "--partitions 0 must be at least 1"),
    # -1 is CreateTopics' "broker default" on the wire; the flag takes only real counts, as
    # kafka-topics ("leave it out for the broker's num.partitions")
    (["topic", "create", "t", "--partitions", "-1"], "--partitions -1 must be at least 1"),
    (["topic", "create", "t", "--replication-factor", "-1"],
     "--replication-factor -1 must be between 1 and 32767"),
    (["topic", "create", "t", "--replication-factor", "40000"],
     "--replication-factor 40000 must be between 1 and 32767"),
    (["topic", "create", "t", "--config", "novalue"], "--config 'novalue' is not KEY=VALUE"),
    (["topic", "alter", "t"], "needs --config KEY=VALUE or --delete-config KEY"),
    (["topic", "alter", "t", "--config", "a=1", "--delete-config", "a"], "pick one"),
    (["topic", "describe", "-o", "xml"], "invalid choice: 'xml'"),
    (["topic", "list", "--bootstrap-server", "nohostport"], "--bootstrap-server"),
    (["consume", "t", "--offset", "5"], "--offset needs --partition"),
    (["consume", "t", "--from-beginning", "--offset", "1"], "not allowed with argument"),
    (["consume", "t", "--max-messages", "0"], "--max-messages 0 must be at least 1"),
    (["produce", "t", "--acks", "2"], "--acks '2' is not valid"),
    (["produce", "t", "--compression", "brotli"], "invalid choice: 'brotli'"),
    (["offsets", "t", "--time", "yesterday"], "--time 'yesterday'"),
    (["dev", "up", "--brokers", "0"], "--brokers 0 must be at least 1"),
    (["reassign", "plan", "--topics", "t"], "--brokers"),
    (["reassign", "plan", "--topics", "t", "--brokers", "1,x"], "--brokers '1,x'"),
    (["reassign", "plan", "--topics", "t", "--brokers", "1,1"], "names an id twice"),
    (["reassign", "plan", "--topics", ",", "--brokers", "1"], "--topics is empty"),
    (["reassign", "plan", "--topics", "t", "--brokers", "1", "--replication-factor", "0"],
     "--replication-factor 0 must be at least 1"),
    (["reassign", "execute"], "--plan"),
    (["reassign", "execute", "--plan", "p", "--throttle", "1", "--no-throttle"],
     "not allowed with argument"),
    (["reassign", "cancel"], "one of the arguments --plan --topics is required"),
    (["reassign", "status", "--interval", "0"], "--interval and --timeout must be positive"),
    (["leader", "elect", "--partition", "1"], "--partition needs --topic"),
    (["dev", "demo", "--records", "0"], "--records 0 must be at least 1"),
    (["broker", "start", "--set", "oops"], "--set 'oops' is not KEY=VALUE"),
])
def test_usage_errors_exit_2_with_one_line(argv: list[str], fragment: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(argv)
    except SystemExit as exit_info:
        code = exit_info.code  # type: ignore[assignment]
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("strom: error: ")
    assert fragment in lines[0]
    assert "Traceback" not in captured.err


def test_installed_entry_point_runs(strom: object) -> None:
    run = strom  # the console script, as users run it
    result = run("--version")  # type: ignore[operator]
    assert result.returncode == 0
    assert result.stdout.strip() == f"strom {__version__}"
    result = run("topic", "create")  # type: ignore[operator]
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1
