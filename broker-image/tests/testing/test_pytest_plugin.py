"""strom.testing.pytest_plugin: tests using a process-starting fixture are marked integration,
and a test that starts a process without the marker fails, naming it."""

from __future__ import annotations

import pytest

from strom.testing.pytest_plugin import shared_groups

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.integration  # the inner runs start short-lived processes

HEADER = '''
import sys
import pytest

from strom.testing.pytest_plugin import shared_groups
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


def test_shared_groups_join_items_that_share_an_instance() -> None:
    # a-b share "m1", b-c share "s": one group, named by its greatest key; d alone; e none
    keys = [["module:x::m1"], ["module:x::m1", "session:t::s"], ["session:t::s"],
            ["module:y::m2"], []]
    assert shared_groups(keys) == ["session:t::s", "session:t::s", "session:t::s",
                                   "module:y::m2", None]
    # the same groups whatever the order of the items (each worker collects the same ids)
    assert shared_groups(keys[::-1]) == shared_groups(keys)[::-1]


SHARED = '''
import os
import pytest

from strom.testing.pytest_plugin import shared_groups
from strom.testing.process import starts_processes

@pytest.fixture(scope="module")
@starts_processes
def server(tmp_path_factory):
    with open(os.environ["CREATED"], "a") as f:
        f.write(f"{__name__}\\n")
    yield

def record(name):
    with open(os.environ["RAN"], "a") as f:
        f.write(f"{name} {os.environ.get('PYTEST_XDIST_WORKER', 'serial')}\\n")
'''


def test_tests_sharing_a_module_fixture_run_on_one_xdist_worker(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``-n 2 --dist loadgroup`` the six tests of each module share one worker, so each
    module's fixture starts once; unshared tests still spread over both workers."""
    created, ran = pytester.path / "created.txt", pytester.path / "ran.txt"
    monkeypatch.setenv("CREATED", str(created))
    monkeypatch.setenv("RAN", str(ran))
    for mod in ("test_a", "test_b"):
        pytester.makepyfile(**{mod: SHARED + "".join(
            f"\ndef test_{i}(server):\n    record('{mod}')\n" for i in range(6))})
    pytester.makepyfile(test_free="from test_a import record\n" + "".join(
        f"\ndef test_{i}():\n    import time; time.sleep(0.2); record('free')\n"
        for i in range(8)))
    result = pytester.runpytest_subprocess(*ARGS, "-n", "2", "--dist", "loadgroup",
                                           "-p", "xdist")
    result.assert_outcomes(passed=20)
    workers: dict[str, set[str]] = {}
    for line in ran.read_text().splitlines():
        name, worker = line.split()
        workers.setdefault(name, set()).add(worker)
    assert len(workers["test_a"]) == 1 and len(workers["test_b"]) == 1, workers
    assert sorted(created.read_text().split()) == ["test_a", "test_b"]  # once per module
    assert workers["free"] == {"gw0", "gw1"}, workers
