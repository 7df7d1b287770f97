"""`kelp storage format --add-scram`: a cluster's first SCRAM users, written before its first start.

The command takes Kafka's `--add-scram` arguments, writes one metadata-log entry at offset 0 into the store the
brokers will load (here the file backend under the broker's log directory), holding credentials and never the
password; a store that holds metadata is refused unless `--ignore-formatted`; a bad argument gets Kafka's
message. (tests/tools/test_kafka_tools_scram.py starts a broker on a store formatted this way.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kelp.broker.metadata.image import image_from_log
from kelp.cli.main import main
from kelp.security.scram import ScramMechanism
from kelp.security.scram_exchange import ScramClient, ScramServer


def entry(data: Path) -> dict:
    return json.loads((data / "cluster" / "metadata" / "log" / f"{0:020d}.json").read_text())


def test_format_writes_the_users_once(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = ["storage", "format", "--log-dirs", str(tmp_path),
            "--add-scram", "SCRAM-SHA-512=[name=alice,password=alice-secret,iterations=8192]",
            "-S", "SCRAM-SHA-256=[name=bob,password=bob-secret]"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "alice (SCRAM-SHA-512, 8192 iterations), bob (SCRAM-SHA-256, 4096 iterations)" in out
    written = entry(tmp_path)
    assert (written["offset"], [r["type"] for r in written["records"]]) == (0, ["scram_credential"] * 2)
    assert "alice-secret" not in json.dumps(written) and "alice-secret" not in out
    image = image_from_log(None, [written])
    server = ScramServer(ScramMechanism.SCRAM_SHA_512,
                         lambda user: image.scram_credentials.get((user, "SCRAM-SHA-512")))
    client = ScramClient(ScramMechanism.SCRAM_SHA_512, "alice", "alice-secret")
    client.verify_server_final(server.evaluate(client.final_message(server.evaluate(client.first_message()))))

    assert main(args) == 1
    assert "already holds metadata up to offset 0" in capsys.readouterr().err
    assert main([*args, "--ignore-formatted"]) == 0
    assert "nothing written" in capsys.readouterr().out
    assert entry(tmp_path) == written


@pytest.mark.parametrize(("argument", "message"), [
    ("SCRAM-SHA-1=[name=a,password=b]", "The add-scram mechanism SCRAM-SHA-1 is not supported."),
    ("SCRAM-SHA-512=[password=b]", "You must supply 'name' to add-scram"),
    ("SCRAM-SHA-512=[name=a,password=b,iterations=100]", "The 'iterations' value must be >= 4096"),
    ("SCRAM-SHA-512=name=a", "Expected configuration string to start with ["),
])
def test_bad_arguments_get_kafkas_messages(tmp_path: Path, capsys: pytest.CaptureFixture, argument: str,
                                           message: str) -> None:
    assert main(["storage", "format", "--log-dirs", str(tmp_path), "--add-scram", argument]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "cluster" / "metadata" / "log").exists() or not any(
        (tmp_path / "cluster" / "metadata" / "log").iterdir())


def test_without_users_there_is_nothing_to_format(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["storage", "format", "--log-dirs", str(tmp_path)]) == 1
    assert "--add-scram" in capsys.readouterr().err
