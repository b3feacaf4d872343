"""The broker image's Dockerfile (no container engine here: its properties are checked as text)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

DOCKERFILE = Path(__file__).resolve().parents[2] / "Dockerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        word, _, rest = current.partition(" ")
        out.append((word.upper(), rest.strip()))
        current = ""
    return out


@pytest.fixture(scope="module")
def parsed() -> list[tuple[str, str]]:
    return instructions(DOCKERFILE.read_text())


def stages(parsed: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for ins in parsed:
        if ins[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def args_of(parsed: list[tuple[str, str]]) -> dict[str, str]:
    return dict(a.split("=", 1) for k, a in parsed if k == "ARG" and "=" in a)


def test_multi_stage_build_on_python_311_slim(parsed: list[tuple[str, str]]) -> None:
    froms = [a for k, a in parsed if k == "FROM"]
    assert len(froms) == 2
    assert froms[0].endswith("AS build")
    base = args_of(parsed).get("PYTHON_IMAGE")
    assert base == "python:3.11-slim"
    assert all(f.split()[0] in ("${PYTHON_IMAGE}", base) for f in froms)


def test_the_wheel_is_built_in_the_build_stage_and_installed_in_the_final_one(
        parsed: list[tuple[str, str]]) -> None:
    build, final = stages(parsed)
    build_runs = " ".join(a for k, a in build if k == "RUN")
    assert "uv build --wheel" in build_runs
    assert any(k == "COPY" and "proto" in a for k, a in build)
    assert any(k == "COPY" and a.startswith("--from=build") for k, a in final)
    assert "pip install /tmp/dist/*.whl" in " ".join(a for k, a in final if k == "RUN")


def test_runs_as_the_non_root_user_strom_uid_1000(parsed: list[tuple[str, str]]) -> None:
    _, final = stages(parsed)
    users = [a for k, a in final if k == "USER"]
    assert users, "the final stage must set USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    assert user in ("1000", "strom")
    runs = " ".join(a for k, a in final if k == "RUN")
    assert re.search(r"useradd .*--uid 1000 .*strom", runs)


def test_entrypoint_cmd_volume_ports_and_env(parsed: list[tuple[str, str]]) -> None:
    _, final = stages(parsed)
    last = {k: a for k, a in final}
    assert json.loads(last["ENTRYPOINT"]) == ["strom"]
    assert json.loads(last["CMD"]) == ["broker", "start"]
    assert last["VOLUME"] == "/var/lib/strom"
    assert set(last["EXPOSE"].split()) == {"9092", "9404"}
    env = " ".join(a for k, a in final if k == "ENV")
    assert "STROM_LOG_DIRS=/var/lib/strom" in env
    assert "STROM_HOST=0.0.0.0" in env


def test_healthcheck_hits_healthz(parsed: list[tuple[str, str]]) -> None:
    _, final = stages(parsed)
    (health,) = [a for k, a in final if k == "HEALTHCHECK"]
    assert "/healthz" in health
    assert "CMD" in health


def test_the_build_context_files_exist() -> None:
    root = DOCKERFILE.parent
    for name in ("pyproject.toml", "hatch_build.py", "README.md", "proto", "src"):
        assert (root / name).exists(), name
