"""Broker config: file formats, environment, overrides, and messages that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.broker.__main__ import main, parse_sets
from strom.broker.config import (
    KEYS,
    BrokerConfig,
    ConfigError,
    load_config,
    parse_properties,
    parse_yaml,
)


def test_defaults() -> None:
    config = load_config(environ={})
    assert config.broker_id == 0
    assert config.host == "127.0.0.1"
    assert config.port == 9092
    assert config.advertised_host == "127.0.0.1"
    assert config.metrics_port == 9404
    assert config.log_dirs == (Path("./strom-data"),)
    assert config.num_partitions == 1
    assert config.auto_create_topics is False
    assert config.maintenance_interval_s == 300.0
    assert config.max_message_size >= 64 * 1024 * 1024
    assert config.explicit == frozenset()


def test_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# a comment\n! another\nbroker.id=3\nport = 9999\nlog.dirs=/a, /b\n"
        "auto.create.topics.enable=true\nlog.retention.ms: 1000\n"
        "broker.rack=rack-\\\n   a\n"
    )
    config = load_config(path, environ={})
    assert config.broker_id == 3
    assert config.port == 9999
    assert config.log_dirs == (Path("/a"), Path("/b"))
    assert config.auto_create_topics is True
    assert config.topic_defaults.retention_ms == 1000
    assert config.rack == "rack-a"


def test_yaml_file_with_nesting_and_native_types(tmp_path: Path) -> None:
    path = tmp_path / "broker.yaml"
    path.write_text(
        "broker.id: 2\nlog:\n  dirs: [/x, /y]\n  retention.ms: 5000\n"
        "auto.create.topics.enable: true\nmetrics.port: 0\n"
    )
    config = load_config(path, environ={})
    assert config.broker_id == 2
    assert config.log_dirs == (Path("/x"), Path("/y"))
    assert config.topic_defaults.retention_ms == 5000
    assert config.auto_create_topics is True
    assert config.metrics_port == 0


def test_format_detected_by_content(tmp_path: Path) -> None:
    props = tmp_path / "broker.conf.txt"
    props.write_text("# c\nbroker.id=4\n")
    assert load_config(props, environ={}).broker_id == 4
    yml = tmp_path / "broker.txt"
    yml.write_text("broker.id: 5\n")
    assert load_config(yml, environ={}).broker_id == 5


def test_precedence_file_then_env_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "b.properties"
    path.write_text("broker.id=1\nport=1111\nnum.partitions=3\n")
    env = {"STROM_BROKER_ID": "2", "STROM_PORT": "2222", "STROM_BOOTSTRAP": "ignored"}
    config = load_config(path, {"broker.id": "7"}, environ=env)
    assert config.broker_id == 7  # override beats env beats file
    assert config.port == 2222  # env beats file
    assert config.num_partitions == 3  # file beats default
    assert {"broker.id", "port", "num.partitions"} <= config.explicit


def test_env_names_every_key() -> None:
    env = {"STROM_LOG_DIRS": "/d1,/d2", "STROM_AUTO_CREATE_TOPICS_ENABLE": "true",
           "STROM_LOG_RETENTION_CHECK_INTERVAL_MS": "1000"}
    config = load_config(environ=env)
    assert config.log_dirs == (Path("/d1"), Path("/d2"))
    assert config.auto_create_topics
    assert config.maintenance_interval_s == 1.0


@pytest.mark.parametrize(
    ("raw", "fragments"),
    [
        ({"log.dir": "/x"}, ["'log.dir'", "did you mean 'log.dirs'"]),
        ({"brokerid": "1"}, ["'brokerid'", "'broker.id'"]),
        ({"totally.unrelated.thing": "1"}, ["'totally.unrelated.thing'"]),
        ({"port": "abc"}, ["port", "'abc'", "integer in [0, 65535]"]),
        ({"port": "70000"}, ["port", "70000", "[0, 65535]"]),
        ({"broker.id": "-1"}, ["broker.id", "-1"]),
        ({"num.partitions": "0"}, ["num.partitions", "'0'", "integer"]),
        ({"auto.create.topics.enable": "yes"}, ["auto.create.topics.enable", "true or false"]),
        ({"log.level": "LOUD"}, ["log.level", "LOUD", "DEBUG"]),
        ({"log.dirs": " , "}, ["log.dirs", "comma-separated"]),
        ({"socket.request.max.bytes": "1024"}, ["socket.request.max.bytes", "1024"]),
        ({"log.retention.ms": "-5"}, ["log.retention.ms", "retention.ms", "-5"]),
        ({"log.cleanup.policy": "shred"}, ["log.cleanup.policy", "shred", "compact"]),
        ({"message.max.bytes": "big"}, ["message.max.bytes", "big"]),
        ({"log.message.timestamp.type": "Now"}, ["log.message.timestamp.type", "LogAppendTime"]),
        ({"log.retention.check.interval.ms": "0"}, ["log.retention.check.interval.ms"]),
    ],
)
def test_errors_name_the_key(raw: dict[str, object], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_mapping(raw)
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_every_key_has_a_working_default_and_docs() -> None:
    config = BrokerConfig.from_mapping({})
    names = [name for name, _, _ in config.describe()]
    assert names == sorted(KEYS)
    assert all(KEYS[n].doc for n in KEYS)


def test_bad_files() -> None:
    with pytest.raises(ConfigError, match=r"f\.yaml.*invalid YAML"):
        parse_yaml("a: [1, 2\n", "f.yaml")
    with pytest.raises(ConfigError, match="expected a mapping"):
        parse_yaml("- 1\n- 2\n", "f.yaml")
    assert parse_properties("a=1\n\n  # x\nb = two words\n") == {"a": "1", "b": "two words"}


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "nope.yaml", environ={})


def test_main_prints_one_line_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--set", "log.dir=/tmp/x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "log.dir" in err and "log.dirs" in err
    with pytest.raises(ConfigError, match="not key=value"):
        parse_sets(["novalue"])
