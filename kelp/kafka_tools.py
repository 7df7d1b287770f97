"""Apache Kafka's own command-line tools (kafka-tools 4.3.1), fetched once with Maven.

Why: Kelp promises that Kafka's admin tools work against it (`kafka-topics`,
the console producer and consumer, `kafka-consumer-groups`, `kafka-configs`,
`kafka-delete-records`, `kafka-get-offsets`, the verifiable producer and
consumer, `kafka-log-dirs`). The tools tier (`tests/tools/`) runs them as
`java -cp <jars> <main class> ...`; `make test` runs `python -m
kelp.kafka_tools` first, so tests never download. The jars land in
`$KELP_CACHE_DIR/kafka-tools-4.3.1` (default `~/.cache/kelp`); a stamp file
marks a complete fetch, after which everything works offline.

The artifacts: `org.apache.kafka:kafka-tools` holds the `org.apache.kafka.tools.*`
main classes, `kafka.admin.ConfigCommand` (`kafka-configs`) lives in the
Scala core jar `kafka_2.13`; both with their runtime dependencies (a throwaway
pom, `dependency:copy-dependencies`). 4.4.0's tools are not in the registry.
Logging is log4j2 through `log4j-slf4j-impl` at WARN on stderr.

What it must never do: download at import time or from any repository but
the one Maven is configured with (its default).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["TOOLS_VERSION", "tools_home", "classpath", "java_command", "fetch", "main"]

TOOLS_VERSION = "4.3.1"
SCALA_VERSION = "2.13"
LOG4J_VERSION = "2.25.5"
ARTIFACTS = ("kafka-tools", f"kafka_{SCALA_VERSION}")
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

_LOG4J2 = """\
status = error
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
"""


def tools_home(version: str = TOOLS_VERSION) -> Path:
    """`$KELP_CACHE_DIR/kafka-tools-<version>` (default `~/.cache/kelp/...`); jars under `libs/`."""
    base = os.environ.get("KELP_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kelp")
    return Path(base) / f"kafka-tools-{version}"


def _pom(version: str) -> str:
    deps = "".join(
        f"<dependency><groupId>org.apache.kafka</groupId><artifactId>{a}</artifactId><version>{version}</version>"
        "</dependency>\n" for a in ARTIFACTS)
    deps += (f"<dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>"
             f"<version>{LOG4J_VERSION}</version></dependency>\n")
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>\n'
            "<groupId>dev.kelp.tools</groupId><artifactId>kafka-tools-jars</artifactId><version>1</version>"
            f"<packaging>pom</packaging>\n<dependencies>\n{deps}</dependencies></project>\n")


def classpath(version: str = TOOLS_VERSION) -> str:
    """The jars as a `-cp` value; FileNotFoundError naming the fetch command when not fetched."""
    home = tools_home(version)
    libs = home / "libs"
    if not (home / "fetched.stamp").is_file() or not libs.is_dir():
        raise FileNotFoundError(f"Kafka's tools {version} are not fetched into {home}; "
                                "run `python -m kelp.kafka_tools` (`make kafka-tools`)")
    return os.pathsep.join(str(p) for p in sorted(libs.glob("*.jar")))


def java_command(main_class: str, *args: str, version: str = TOOLS_VERSION) -> list[str]:
    """`java -cp <jars> <main class> args...` with a small heap and quiet logging."""
    java = shutil.which("java") or "java"
    config = tools_home(version) / "log4j2.properties"
    return [java, "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
            f"-Dlog4j2.configurationFile={config}", "-cp", classpath(version), main_class, *args]


def fetch(version: str = TOOLS_VERSION, *, quiet: bool = True) -> Path:
    """The libs directory, fetched with Maven unless a previous fetch completed (idempotent)."""
    home = tools_home(version)
    libs, stamp = home / "libs", home / "fetched.stamp"
    if stamp.is_file() and libs.is_dir():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise FileNotFoundError("Maven (`mvn`) is needed to fetch Kafka's tools; `make deps` installs it")
    home.mkdir(parents=True, exist_ok=True)
    partial = home / "libs.partial"
    shutil.rmtree(partial, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="kelp-tools-pom-") as tmp:
        (Path(tmp) / "pom.xml").write_text(_pom(version))
        command = [mvn, "-B", *(["-q"] if quiet else []), "-f", str(Path(tmp) / "pom.xml"),
                   f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime",
                   f"-DoutputDirectory={partial}"]
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    if done.returncode != 0 or not any(partial.glob(f"kafka-tools-{version}.jar")):
        raise RuntimeError(f"fetching Kafka's tools {version} with Maven failed (exit {done.returncode}):\n"
                           f"{done.stdout[-2000:]}")
    shutil.rmtree(libs, ignore_errors=True)
    partial.rename(libs)
    (home / "log4j2.properties").write_text(_LOG4J2)
    stamp.write_text(f"{version}\n")
    return libs


def main() -> int:
    try:
        libs = fetch()
    except (FileNotFoundError, RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"kelp.kafka_tools: {exc}", file=sys.stderr)
        return 1
    print(libs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
