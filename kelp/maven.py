"""Fetching jars with Maven into Kelp's cache: one plugin pin, one idempotent copy of a pom's runtime jars.

Why: Spark's Kafka connector (kelp.spark.jars), Apache Kafka's own tools
(kelp.kafka_tools), Kafka Connect (kelp.kafka_connect) and the bench's
reference broker (bench/kafka_ref.py) all come from Maven, through the repository Maven is configured with (its
default). The runtime-dependency fetch is the same each time: a throwaway
pom, `dependency:copy-dependencies` into a partial directory, renamed into
place and stamped only when the expected jar arrived, so an interrupted
fetch is redone and a finished one never touches the network again.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["DEPENDENCY_PLUGIN", "mvn_binary", "fetch_runtime_jars"]

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


def mvn_binary(what: str) -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise FileNotFoundError(f"Maven (`mvn`) is needed to fetch {what}; `make deps` installs it")
    return mvn


def fetch_runtime_jars(home: Path, pom: str, *, marker_jar: str, what: str, stamp: str, quiet: bool = True,
                       timeout_s: float = 900, hint: str = "") -> Path:
    """`home/libs` with the pom's runtime jars, fetched unless `home/fetched.stamp` says a fetch completed.

    `marker_jar` (a glob) must be among the copied files; otherwise the fetch failed and nothing is stamped.
    """
    libs, stamp_file = home / "libs", home / "fetched.stamp"
    if stamp_file.is_file() and libs.is_dir():
        return libs
    mvn = mvn_binary(what)
    home.mkdir(parents=True, exist_ok=True)
    partial = home / "libs.partial"
    shutil.rmtree(partial, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="kelp-pom-") as tmp:
        (Path(tmp) / "pom.xml").write_text(pom)
        command = [mvn, "-B", *(["-q"] if quiet else []), "-f", str(Path(tmp) / "pom.xml"),
                   f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime",
                   f"-DoutputDirectory={partial}"]
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout_s)
    if done.returncode != 0 or not any(partial.glob(marker_jar)):
        raise RuntimeError(f"fetching {what} with Maven failed (exit {done.returncode}){hint}:\n{done.stdout[-2000:]}")
    shutil.rmtree(libs, ignore_errors=True)
    partial.rename(libs)
    stamp_file.write_text(f"{stamp}\n")
    return libs
