"""Without Java the Spark tests say so (skip, or fail under CI=true), not JAVA_GATEWAY_EXITED."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from strom_spark.java import java_missing


def test_java_found_on_path_or_in_java_home(tmp_path: Path) -> None:
    assert java_missing({}, which=lambda _: "/usr/bin/java") is None
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "java").write_text("")
    assert java_missing({"JAVA_HOME": str(tmp_path)}, which=lambda _: None) is None


def test_missing_java_names_what_to_install(tmp_path: Path) -> None:
    reason = java_missing({}, which=lambda _: None)
    assert reason is not None and "openjdk-17-jre-headless" in reason and "JAVA_HOME" in reason
    reason = java_missing({"JAVA_HOME": str(tmp_path)}, which=lambda _: "/usr/bin/java")
    assert reason is not None and "has no bin/java" in reason


SPARK_TEST = '''
def test_needs_spark(spark):
    pass
'''


def _run_without_java(tmp_path: Path, ci: str) -> subprocess.CompletedProcess[str]:
    tmp_path.mkdir()
    conftest = Path(__file__).with_name("conftest.py")
    (tmp_path / "conftest.py").write_text(conftest.read_text())
    (tmp_path / "test_needs_spark.py").write_text(SPARK_TEST)
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "CI")}
    env.update(PATH=str(Path(sys.executable).parent), CI=ci)  # the venv's bin: no java there
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)


def test_spark_fixture_fails_without_java_under_ci(tmp_path: Path) -> None:
    """The suite's own conftest, in a pytest run without Java on PATH and CI=true: the Spark
    test fails with the reason (without CI it is skipped with the same reason)."""
    ci = _run_without_java(tmp_path / "ci", "true")
    assert ci.returncode == 1, ci.stdout + ci.stderr
    assert "CI=true but no Java runtime" in ci.stdout, ci.stdout
    assert "openjdk-17-jre-headless" in ci.stdout, ci.stdout
