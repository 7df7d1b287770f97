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
Logging is log4j2 through `log4j-slf4j-impl` at WARN on stderr. A class-data
archive (AppCDS, `ensure_archive`) built once per JDK and classpath halves the
CPU each tool's JVM spends starting; a test's or bench's single-file Java
program is compiled once (`compiled_source`), not by every JVM that runs it.

The bundle helpers (`cache_home`, `fetch_bundle`, `bundle_classpath`, `fetch_main`) serve any set of
Kafka's jars kept this way: `kelp.kafka_connect` uses them for Kafka Connect.

What it must never do: download at import time or from any repository but
the one Maven is configured with (its default).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from kelp.maven import fetch_runtime_jars

__all__ = ["TOOLS_VERSION", "tools_home", "classpath", "java_command", "compiled_source", "archive_path",
           "ensure_archive", "fetch", "main", "cache_home", "bundle_classpath", "fetch_bundle", "fetch_main"]

TOOLS_VERSION = "4.3.1"
SCALA_VERSION = "2.13"
LOG4J_VERSION = "2.25.5"
ARTIFACTS = ("kafka-tools", f"kafka_{SCALA_VERSION}")

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


# -- a bundle of Kafka's jars in Kelp's cache (this module's, and `kelp.kafka_connect`'s) ----------------------------


def cache_home(name: str) -> Path:
    """`$KELP_CACHE_DIR/<name>` (default `~/.cache/kelp/<name>`); a bundle's jars go under its `libs/`."""
    base = os.environ.get("KELP_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kelp")
    return Path(base) / name


def bundle_classpath(home: Path, *, what: str, fetch_hint: str) -> str:
    """The bundle's jars as a `-cp` value; FileNotFoundError naming `fetch_hint` when not fetched."""
    libs = home / "libs"
    if not (home / "fetched.stamp").is_file() or not libs.is_dir():
        raise FileNotFoundError(f"{what} not fetched into {home}; run {fetch_hint}")
    return os.pathsep.join(str(p) for p in sorted(libs.glob("*.jar")))


def fetch_bundle(home: Path, artifacts: tuple[str, ...], version: str, *, marker_jar: str, what: str,
                 quiet: bool = True) -> Path:
    """The libs directory of Kafka's `artifacts` at `version` with their runtime dependencies and log4j2 (its
    properties file beside them), fetched with Maven unless a previous fetch completed (idempotent)."""
    libs = fetch_runtime_jars(home, _pom(artifacts, version), marker_jar=marker_jar, what=what, stamp=version,
                              quiet=quiet)
    log4j = home / "log4j2.properties"
    if not log4j.is_file():
        log4j.write_text(_LOG4J2)
    return libs


def fetch_main(fetch: Callable[[], Path], module: str) -> int:
    """`python -m <module>`: fetch, print the libs directory; 1 with the reason when the fetch failed."""
    try:
        libs = fetch()
    except (FileNotFoundError, RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"{module}: {exc}", file=sys.stderr)
        return 1
    print(libs)
    return 0


# -- Kafka's tools --------------------------------------------------------------------------------------------------


def tools_home(version: str = TOOLS_VERSION) -> Path:
    """`$KELP_CACHE_DIR/kafka-tools-<version>` (default `~/.cache/kelp/...`); jars under `libs/`."""
    return cache_home(f"kafka-tools-{version}")


def _pom(artifacts: tuple[str, ...], version: str) -> str:
    deps = "".join(
        f"<dependency><groupId>org.apache.kafka</groupId><artifactId>{a}</artifactId><version>{version}</version>"
        "</dependency>\n" for a in artifacts)
    deps += (f"<dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>"
             f"<version>{LOG4J_VERSION}</version></dependency>\n")
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>\n'
            "<groupId>dev.kelp.tools</groupId><artifactId>kafka-tools-jars</artifactId><version>1</version>"
            f"<packaging>pom</packaging>\n<dependencies>\n{deps}</dependencies></project>\n")


def classpath(version: str = TOOLS_VERSION) -> str:
    """The jars as a `-cp` value; FileNotFoundError naming the fetch command when not fetched."""
    return bundle_classpath(tools_home(version), what=f"Kafka's tools {version} are",
                            fetch_hint="`python -m kelp.kafka_tools` (`make kafka-tools`)")


def _java() -> str:
    return shutil.which("java") or "java"


def archive_path(version: str = TOOLS_VERSION) -> Path:
    """The class-data archive for this JDK and these jars (a new JDK or classpath gets a new file)."""
    java = os.path.realpath(_java())
    try:
        stamp = os.stat(java).st_mtime_ns
    except OSError:
        stamp = 0
    key = hashlib.sha1(f"{java}:{stamp}:{classpath(version)}".encode()).hexdigest()[:12]
    return tools_home(version) / f"classes-{key}.jsa"


def compiled_source(source: Path, version: str = TOOLS_VERSION, *, timeout_s: float = 120.0) -> Path | None:
    """The classes of one single-file Java program (no package), compiled once against these jars, or None.

    Why: `java Prog.java` (the source launcher) runs javac inside every JVM it starts, about 0.9 CPU-s and
    2 s of a start on a loaded machine; tests start such programs many times. The directory is keyed by
    the source and the classpath and appears whole (a rename), so concurrent callers never see half of it.
    None when javac is absent or fails: the caller runs the source launcher, which reports the error.
    """
    javac = shutil.which("javac")
    if javac is None:
        return None
    jars = classpath(version)
    key = hashlib.sha1(source.read_bytes() + jars.encode()).hexdigest()[:12]
    target = tools_home(version) / "compiled" / f"{source.stem}-{key}"
    if (target / f"{source.stem}.class").is_file():
        return target
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        done = subprocess.run([javac, "-nowarn", "-cp", jars, "-d", str(partial), str(source)],
                              capture_output=True, timeout=timeout_s)
        if done.returncode == 0:
            os.rename(partial, target)
    except OSError:  # another caller renamed its copy first: that one is as good
        pass
    except subprocess.TimeoutExpired:
        return None
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target if (target / f"{source.stem}.class").is_file() else None


def java_command(main_class: str, *args: str, version: str = TOOLS_VERSION, archive: bool = True) -> list[str]:
    """`java -cp <jars> <main class> args...`: a small heap, quiet logging, the class archive when built.

    `main_class` may be a single-file program's `.java` path: it runs compiled once (`compiled_source`), its
    classes after the jars on the classpath (so the class archive, built for the jars, still applies).
    JVM warnings go to stderr (by default they go to stdout, where tools print their answers).
    """
    config = tools_home(version) / "log4j2.properties"
    cds = archive_path(version) if archive else None
    share = [f"-XX:SharedArchiveFile={cds}"] if cds is not None and cds.is_file() else []
    jars = classpath(version)
    if main_class.endswith(".java") and (classes := compiled_source(Path(main_class), version)) is not None:
        jars, main_class = f"{jars}{os.pathsep}{classes}", Path(main_class).stem
    return [_java(), "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto", *share,
            "-Xlog:disable", "-Xlog:all=warning:stderr", f"-Dlog4j2.configurationFile={config}",
            "-cp", jars, main_class, *args]


def ensure_archive(bootstrap: str, *, version: str = TOOLS_VERSION, timeout_s: float = 120.0) -> Path | None:
    """Build the class-data archive once (AppCDS) from one admin tool talking to `bootstrap`.

    Every later tool JVM maps the classes instead of loading and verifying them: about half the CPU of
    a tool's start. A failed build leaves no archive (the tools then run without one); the path or None.
    """
    target = archive_path(version)
    if target.is_file():
        return target
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    command = java_command("kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, "--entity-type", "topics",
                           "--describe", version=version, archive=False)
    command.insert(1, f"-XX:ArchiveClassesAtExit={partial}")
    try:
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout_s)
        if partial.is_file():
            os.replace(partial, target)
    except (OSError, subprocess.TimeoutExpired):
        pass
    finally:
        partial.unlink(missing_ok=True)
    return target if target.is_file() else None


def fetch(version: str = TOOLS_VERSION, *, quiet: bool = True) -> Path:
    """The libs directory, fetched with Maven unless a previous fetch completed (idempotent)."""
    return fetch_bundle(tools_home(version), ARTIFACTS, version, marker_jar=f"kafka-tools-{version}.jar",
                        what=f"Kafka's tools {version}", quiet=quiet)


def main() -> int:
    return fetch_main(fetch, "kelp.kafka_tools")


if __name__ == "__main__":
    sys.exit(main())
