"""Which filesystem the benchmarks' brokers write to (``harness.filesystem_of``), recorded in
every JSON's machine info: on this VM Apache Kafka's memory-mapped index writes cost
milliseconds a page on the ext4 disk and microseconds on tmpfs, so a Strom / Kafka ratio means
little without it. One test reads this machine's own mount table."""

from __future__ import annotations

import importlib
import os
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]

MOUNTS = """\
/dev/vda / ext4 rw,relatime,discard 0 0
proc /proc proc rw,nosuid 0 0
tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0
tmpfs /tmp/fast tmpfs rw,size=1g 0 0
/dev/vdb /mnt/with\\040space xfs rw 0 0
"""


@pytest.fixture
def harness(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks.harness``, with the repository root on sys.path for this test only."""
    monkeypatch.syspath_prepend(str(ROOT))
    return importlib.import_module("benchmarks.harness")


def test_the_longest_mount_point_holding_the_path_wins(harness: ModuleType) -> None:
    assert harness.filesystem_of("/dev/shm/strom-bench-x/kafka", MOUNTS) == {
        "mount_point": "/dev/shm", "type": "tmpfs", "options": "rw,nosuid,nodev"}
    assert harness.filesystem_of("/tmp/fast", MOUNTS)["type"] == "tmpfs"
    assert harness.filesystem_of("/tmp/strom-bench-y", MOUNTS)["type"] == "ext4"


def test_a_sibling_with_the_same_prefix_is_not_inside(harness: ModuleType) -> None:
    # /tmp/faster is not under /tmp/fast: it is on the root filesystem
    assert harness.filesystem_of("/tmp/faster/data", MOUNTS)["mount_point"] == "/"


def test_escaped_spaces_and_no_match(harness: ModuleType) -> None:
    assert harness.filesystem_of("/mnt/with space/logs", MOUNTS)["type"] == "xfs"
    assert harness.filesystem_of("/anything", "") == {}
    assert harness.filesystem_of("/anything", "garbage\n\n") == {}


def test_machine_info_names_the_temporary_directory_and_its_filesystem(
        harness: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    info = harness.machine_info()
    assert info["data_dir"] == os.path.realpath(tmp_path)
    fs = info["data_filesystem"]
    assert os.path.realpath(tmp_path).startswith(fs["mount_point"].rstrip("/") + "/")
    assert fs["type"]
