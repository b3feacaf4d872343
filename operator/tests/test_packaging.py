"""The entry point, the Dockerfile and the layering contracts the operator promises."""

from __future__ import annotations

import tomllib

from tests.helpers import REPO


def test_entry_point_and_main():
    project = tomllib.loads((REPO / "operator" / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["strom-operator"] == "strom_operator.main:main"
    from strom_operator import main

    args = main.parse_args(["-n", "a", "-n", "b", "--log-level", "DEBUG"])
    assert args.namespace == ["a", "b"] and args.log_level == "DEBUG"


def test_dockerfile_runs_non_root_with_the_entry_point():
    text = (REPO / "operator" / "Dockerfile").read_text()
    # The base is a build argument (a Debian-made equivalent where Docker Hub is out of
    # reach); upstream Docker builds still get python:3.11-slim by default.
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in text
    froms = [line for line in text.splitlines() if line.startswith("FROM ")]
    assert froms and all(line.startswith("FROM ${PYTHON_IMAGE}") for line in froms), froms
    assert "USER 10001" in text
    assert 'ENTRYPOINT ["strom-operator"]' in text


def test_model_imports_no_kubernetes_or_kopf():
    """The same rule import-linter enforces, checked here on the source too."""
    for path in (REPO / "operator" / "src" / "strom_operator" / "model").glob("*.py"):
        text = path.read_text()
        assert "import kopf" not in text and "import kubernetes" not in text, path.name
        assert "from kubernetes" not in text and "from kopf" not in text, path.name
