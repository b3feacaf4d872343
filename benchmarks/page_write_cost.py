"""What the first write to a file page costs here: through a memory map (Apache Kafka's index
files) against ``pwrite`` (Strom's indexes and every log write), per directory.

Why it exists: on this project's VM, Kafka's 1,000-partition keyed produce spent 5-26 s of its
request threads' CPU where the same run on tmpfs spent 0.6-1.0 s, and ``jstack`` found those
threads in ``TimeIndex.maybeAppend`` / ``OffsetIndex.append``: the store into a freshly mapped
index page. Kafka creates each segment's two index files at their full size
(``log.index.size.max.bytes``) and maps them, so the first entry in each 4 KiB page takes a
page fault the kernel serves by reading the page in; on this VM's ext4 disk that read costs
milliseconds where a real disk or tmpfs costs microseconds. Strom keeps its index entries in
memory and writes them with ``pwrite`` at flush (``strom.storage.index``), which never faults.
A Strom / Kafka figure measured on such a disk is therefore partly a figure of the disk.

The measurement: ``--files`` files of ``--size`` bytes, created as Kafka creates an index
(``ftruncate`` to full size: sparse), each mapped; one 12-byte store (a time-index entry) at
the start of each, timed, with the process's major faults and system CPU from ``getrusage``;
then the same first write with ``os.pwrite`` into another set of files. ``--dirs`` lists the
directories to compare (default: the temporary directory, where the benchmarks' brokers keep
their data, and ``/dev/shm``). Run: ``python -m benchmarks.page_write_cost [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import resource
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.harness import filesystem_of, machine_info

ENTRY = b"\x00" * 12
"""One time-index entry (timestamp int64, relative offset int32), as Kafka's TimeIndex."""


@dataclass
class WriteCost:
    directory: str
    filesystem: str
    method: str
    """``mmap``: a store into a mapped page; ``pwrite``: the system call."""
    files: int
    wall_us: float
    """Wall microseconds per first write."""
    system_us: float
    """System CPU microseconds per first write (``getrusage``, 10 ms resolution or better)."""
    major_faults: float
    """Major page faults per first write."""


def per_write(before: resource.struct_rusage, after: resource.struct_rusage, wall_s: float,
              writes: int) -> tuple[float, float, float]:
    """(wall us, system CPU us, major faults) per write between two ``getrusage`` readings."""
    return (1e6 * wall_s / writes, 1e6 * (after.ru_stime - before.ru_stime) / writes,
            (after.ru_majflt - before.ru_majflt) / writes)


def measure(directory: Path, method: str, files: int, size: int) -> WriteCost:
    """The first write into each of ``files`` fresh sparse files of ``size`` bytes."""
    if method not in ("mmap", "pwrite"):
        raise ValueError(f"method must be mmap or pwrite, not {method!r}")
    if files < 1 or size < len(ENTRY):
        raise ValueError(f"files must be at least 1 and size at least {len(ENTRY)} bytes "
                         f"(got {files} and {size})")
    with tempfile.TemporaryDirectory(prefix="strom-page-write-", dir=directory) as tmp:
        fds = []
        maps: list[mmap.mmap] = []
        try:
            for i in range(files):
                fd = os.open(Path(tmp) / f"{i:05d}.timeindex", os.O_RDWR | os.O_CREAT, 0o644)
                fds.append(fd)
                os.ftruncate(fd, size)
                if method == "mmap":
                    maps.append(mmap.mmap(fd, size))
            write: Callable[[int], None]
            if method == "mmap":
                def write(i: int) -> None:
                    maps[i][0:len(ENTRY)] = ENTRY
            else:
                def write(i: int) -> None:
                    os.pwrite(fds[i], ENTRY, 0)
            before = resource.getrusage(resource.RUSAGE_SELF)
            start = time.perf_counter()
            for i in range(files):
                write(i)
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_SELF)
        finally:
            for m in maps:
                m.close()
            for fd in fds:
                os.close(fd)
    real = os.path.realpath(directory)
    fs = filesystem_of(real, Path("/proc/self/mounts").read_text()).get("type", "?")
    return WriteCost(real, fs, method, files, *per_write(before, after, wall, files))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dirs", default=f"{tempfile.gettempdir()},/dev/shm",
                        help="comma-separated directories to compare")
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--size", type=int, default=10 << 20,
                        help="bytes per file (Kafka's log.index.size.max.bytes default)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.files < 1 or args.size < len(ENTRY):
        parser.error(f"--files must be at least 1 and --size at least {len(ENTRY)}")
    rows = []
    for d in args.dirs.split(","):
        directory = Path(d)
        if not directory.is_dir():
            parser.error(f"--dirs: {d} is not a directory")
        for method in ("mmap", "pwrite"):
            row = measure(directory, method, args.files, args.size)
            rows.append(row)
            print(f"{row.directory} ({row.filesystem}) {method}: first write "
                  f"{row.wall_us:,.1f} us wall, {row.system_us:,.1f} us system CPU, "
                  f"{row.major_faults:.2f} major faults", flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"machine": machine_info(), "files": args.files,
                                         "size": args.size,
                                         "rows": [asdict(r) for r in rows]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
