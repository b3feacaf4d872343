"""strom.testing.pytest_plugin: tests using a process-starting fixture are marked integration,
and a test that starts a process without the marker fails, naming it."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.integration  # the inner runs start short-lived processes

HEADER = '''
import sys
import pytest
from strom.testing.process import ManagedProcess, starts_processes

def start(tmp_path, name):
    proc = ManagedProcess([sys.executable, "-c", "import time; time.sleep(30)"],
                          tmp_path / "out.log", name=name).start()
    proc.stop(timeout=5)

@pytest.fixture
@starts_processes
def server(tmp_path):
    start(tmp_path, "flagged server")
    yield

@pytest.fixture
def through(server):
    yield
'''

ARGS = ("-p", "strom.testing.pytest_plugin", "-p", "no:cacheprovider", "-p", "no:asyncio",
        "-o", "markers=integration: starts processes")


def test_an_unmarked_test_that_starts_a_process_fails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(HEADER + '''
def test_unmarked(tmp_path):
    start(tmp_path, "stray server")

@pytest.mark.integration
def test_marked(tmp_path):
    start(tmp_path, "known server")

def test_no_process():
    pass
''')
    result = pytester.runpytest(*ARGS)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_unmarked started stray server but is not marked "
                                 "'integration'*"])


def test_a_flagged_fixture_marks_its_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(HEADER + '''
def test_direct(server):
    pass

def test_indirect(through):
    pass

def test_plain():
    pass
''')
    result = pytester.runpytest(*ARGS, "-m", "not integration")
    result.assert_outcomes(passed=1, deselected=2)
    result = pytester.runpytest(*ARGS, "-m", "integration")
    result.assert_outcomes(passed=2, deselected=1)
