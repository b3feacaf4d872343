"""The ``python -m strom.controller`` arguments: voter lists and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.controller.__main__ import main
from strom.controller.quorum_server import ControllerConfig, parse_voters


def test_parse_voters() -> None:
    assert parse_voters("0@127.0.0.1:9093, 1@127.0.0.1:9094,2@host-2:9095") == {
        0: "127.0.0.1:9093",
        1: "127.0.0.1:9094",
        2: "host-2:9095",
    }


@pytest.mark.parametrize("text", ["", "0@127.0.0.1", "x@h:1", "0@h:1,0@h:2", "h:1"])
def test_bad_voters(text: str) -> None:
    with pytest.raises(ValueError):
        parse_voters(text)


def test_listen_port_defaults_to_own_voter_entry(tmp_path: Path) -> None:
    config = ControllerConfig(1, {0: "h:1", 1: "h:2"}, data_dir=tmp_path)
    assert config.listen_port() == 2
    assert config.raft_config().voters == frozenset({0, 1})


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ["--node-id", "5", "--voters", "0@127.0.0.1:1", "--data-dir", str(tmp_path)]
    assert main(argv) == 2
    assert "node 5 is not a voter" in capsys.readouterr().err
    argv = ["--node-id", "0", "--voters", "0@nowhere", "--data-dir", str(tmp_path)]
    assert main(argv) == 2
