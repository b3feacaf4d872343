"""Is there a Java runtime for pyspark? A clear answer instead of ``JAVA_GATEWAY_EXITED``.

pyspark starts a JVM (``java`` from ``JAVA_HOME/bin`` or ``PATH``); without one it fails with
``[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number``, which does
not say what to install. The Spark tests skip with this reason on a machine without Java and
fail with it under ``CI=true`` (``.ci/run`` installs Java 17), so CI never passes by skipping.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

INSTALL_HINT = ("install Java 17 (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) or "
                "set JAVA_HOME to a Java 17 installation")


def java_missing(env: Mapping[str, str] | None = None,
                 which: Callable[[str], str | None] = shutil.which) -> str | None:
    """Why pyspark cannot start a JVM here, or None when a ``java`` is found."""
    env = os.environ if env is None else env
    java_home = env.get("JAVA_HOME", "")
    if java_home:
        if (Path(java_home) / "bin" / "java").is_file():
            return None
        return f"JAVA_HOME={java_home} has no bin/java; {INSTALL_HINT}"
    if which("java"):
        return None
    return f"no Java runtime (java is not on PATH and JAVA_HOME is unset); pyspark needs one: " \
           f"{INSTALL_HINT}"

