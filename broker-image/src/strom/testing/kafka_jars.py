"""Apache Kafka's jars for the reference cluster, fetched by Maven into a cache outside the repo.

Kafka is the reference every compatibility test and benchmark is measured against (issue 20), so
it runs here from its own Maven artifacts, pinned in ``kafka-ref/pom.xml`` (the one place the
version is written). :func:`ensure_jars` resolves that pom once with ``mvn
dependency:copy-dependencies`` into ``$XDG_CACHE_HOME/strom/kafka/<version>/libs`` (default
``~/.cache``) and returns the directory; later calls only check a marker that records the pom's
hash, so an edited pom is fetched again. Concurrent callers (``pytest -n 2``) wait on a file lock
instead of fetching twice. ``kafka-ref/fetch`` is the command-line front (CI runs it).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "KafkaToolMissing",
    "ensure_jars",
    "java_binary",
    "kafka_version",
    "libs_dir",
    "pom_path",
    "spark_kafka_jars",
    "spark_kafka_pom",
]

#: Where the repository keeps the pom, relative to its root.
POM_RELATIVE = Path("kafka-ref") / "pom.xml"
#: Spark's Kafka connector (format("kafka")) and the jars it adds to pyspark.
SPARK_POM_RELATIVE = Path("kafka-ref") / "spark-kafka" / "pom.xml"
MARKER = ".complete"
#: A cold fetch took 45 s on this VM (96 jars, 126 MB); leave room for a slow mirror.
FETCH_TIMEOUT_S = 900.0
_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
INSTALL_HINT = ("install them: apt-get install -y maven openjdk-17-jdk-headless "
                "(Debian), or put mvn and java on PATH")


class KafkaToolMissing(RuntimeError):
    """Java or Maven is not installed, or the jars cannot be fetched."""


def pom_path() -> Path:
    """``kafka-ref/pom.xml`` of the repository this package runs from (``STROM_KAFKA_POM``
    names another one)."""
    override = os.environ.get("STROM_KAFKA_POM")
    if override:
        return Path(override)
    for parent in Path(__file__).resolve().parents:
        candidate = parent / POM_RELATIVE
        if candidate.is_file():
            return candidate
    raise KafkaToolMissing(
        f"no {POM_RELATIVE} above {Path(__file__).parent}: run from a checkout of the Strom "
        "repository or set STROM_KAFKA_POM to the pom's path")


def spark_kafka_pom() -> Path:
    """``kafka-ref/spark-kafka/pom.xml`` beside :func:`pom_path`."""
    return pom_path().parent / SPARK_POM_RELATIVE.relative_to(POM_RELATIVE.parent)


def spark_kafka_jars() -> list[Path]:
    """The jars of Spark's Kafka connector (fetched if needed), for ``spark.jars``."""
    return sorted(ensure_jars(spark_kafka_pom()).glob("*.jar"))


def cache_name(pom: Path | None = None) -> str:
    """The cache directory's name for a pom: its ``strom.cache.name`` property (with
    ``${...}`` properties replaced) if it has one, else its ``kafka.version``."""
    path = pom or pom_path()
    props = ET.parse(path).getroot().find("m:properties", _NS)
    values = {} if props is None else {
        child.tag.split("}", 1)[-1]: (child.text or "").strip() for child in props}
    name = values.get("strom.cache.name")
    if not name:
        return kafka_version(path)
    for key, value in values.items():
        name = name.replace("${" + key + "}", value)
    return name


def kafka_version(pom: Path | None = None) -> str:
    """The ``kafka.version`` property of the pom."""
    path = pom or pom_path()
    node = ET.parse(path).getroot().find("m:properties/m:kafka.version", _NS)
    if node is None or not (node.text or "").strip():
        raise KafkaToolMissing(f"{path} has no <properties><kafka.version>")
    return (node.text or "").strip()


def libs_dir(version: str | None = None) -> Path:
    """``$XDG_CACHE_HOME/strom/kafka/<version>/libs`` (fetched or not)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "strom" / "kafka" / (version or kafka_version()) / "libs"


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` or ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise KafkaToolMissing(f"java is not installed (Kafka needs Java 17+); {INSTALL_HINT}")
    return found


def _pom_hash(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()[:16]


def is_fetched(pom: Path | None = None) -> bool:
    """True if the cache holds the jars of this very pom."""
    path = pom or pom_path()
    marker = libs_dir(cache_name(path)) / MARKER
    try:
        return marker.read_text().split()[0] == _pom_hash(path)
    except (OSError, IndexError):
        return False


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_jars(pom: Path | None = None, *, quiet: bool = True) -> Path:
    """The libs directory with every jar of the pom, fetching them first if needed."""
    path = (pom or pom_path()).resolve()
    version = cache_name(path)
    libs = libs_dir(version)
    if is_fetched(path):
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaToolMissing(f"mvn is not installed and {libs} holds no Kafka {version} jars; "
                               f"{INSTALL_HINT}")
    with _locked(libs.parent / ".fetch.lock"):
        if is_fetched(path):  # another process fetched meanwhile
            return libs
        staging = libs.parent / f"libs.fetching-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        log = libs.parent / "fetch.log"
        started = time.monotonic()
        argv = [mvn, "-B", *(["-q"] if quiet else []), "-f", str(path),
                "dependency:copy-dependencies", f"-DoutputDirectory={staging}",
                "-DincludeScope=runtime"]
        with open(log, "wb") as out:
            try:
                result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, timeout=FETCH_TIMEOUT_S,
                                        check=False)
            except subprocess.TimeoutExpired:
                raise KafkaToolMissing(f"mvn did not fetch Kafka {version}'s jars within "
                                       f"{FETCH_TIMEOUT_S:.0f} s; see {log}") from None
        jars = sorted(p.name for p in staging.glob("*.jar")) if staging.is_dir() else []
        if result.returncode != 0 or not jars:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            shutil.rmtree(staging, ignore_errors=True)
            raise KafkaToolMissing(f"mvn could not fetch Kafka {version}'s jars (exit "
                                   f"{result.returncode}); see {log}:\n{tail}")
        (staging / MARKER).write_text(
            f"{_pom_hash(path)} {version} {len(jars)} jars in "
            f"{time.monotonic() - started:.1f} s\n")
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
    return libs


def main() -> int:
    """``python -m strom.testing.kafka_jars``: fetch (if needed) and print the libs dir."""
    import sys

    try:
        started = time.monotonic()
        libs = ensure_jars(quiet=False)
        spark = ensure_jars(spark_kafka_pom(), quiet=False)
    except KafkaToolMissing as err:
        print(f"kafka-ref: error: {err}", file=sys.stderr)
        return 1
    print(f"kafka-ref: {len(list(libs.glob('*.jar')))} jars in {libs}, Spark's Kafka connector "
          f"in {spark} ({time.monotonic() - started:.1f} s)", file=sys.stderr)
    print(libs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
