"""A single-file Java program that tests start many times is compiled once (`kafka_tools.compiled_source`).

Why: `java Prog.java` runs javac inside every JVM it starts (about 0.9 CPU-s of each start); the groups and
transactions tiers start ShareConsume and GroupTransact again and again. The program must still run against
Kafka's jars, with the class-data archive, and an edited source must never run as its stale compiled self.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kelp import kafka_tools

PROGRAM = """\
import org.apache.kafka.common.utils.Utils;

public class KelpCompiledOnce {
    public static void main(String[] args) {
        System.out.println("%s " + Utils.murmur2(args[0].getBytes()));
    }
}
"""


@pytest.fixture
def program(tmp_path: Path) -> Path:
    if shutil.which("java") is None or shutil.which("javac") is None:
        pytest.skip("no JDK: Java programs cannot run")
    kafka_tools.fetch()  # a no-op after `make test`'s bootstrap
    return tmp_path / "KelpCompiledOnce.java"


def _run(source: Path, arg: str) -> str:
    command = kafka_tools.java_command(str(source), arg)
    assert str(source) not in command, "the program runs compiled, not through the source launcher"
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "shared archive" not in done.stderr, done.stderr  # the archive still maps: the jars come first
    return done.stdout.strip()


def test_a_java_program_is_compiled_once_and_recompiled_when_edited(program: Path) -> None:
    program.write_text(PROGRAM % "first")
    assert _run(program, "kelp") == "first -1241639627"  # Kafka's murmur2 of b"kelp" (the jars); kafka-python agrees
    classes = kafka_tools.compiled_source(program)
    assert classes is not None
    compiled_at = (classes / "KelpCompiledOnce.class").stat().st_mtime_ns
    assert _run(program, "kelp").startswith("first ")
    assert (classes / "KelpCompiledOnce.class").stat().st_mtime_ns == compiled_at, "compiled again"

    program.write_text(PROGRAM % "second")
    assert _run(program, "kelp").startswith("second "), "an edited source ran as its old classes"
    assert kafka_tools.compiled_source(program) != classes
