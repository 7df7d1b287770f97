"""The `kelp` entry point: subcommand registry and delegation to the broker's parser."""

from __future__ import annotations

import pytest

from kelp.cli.main import COMMAND_MODULES, build_parser, main


def test_every_registered_module_adds_its_command() -> None:
    help_text = build_parser().format_help()
    for command in ("broker", "topics", "produce", "consume"):
        assert command in help_text
    assert COMMAND_MODULES[0] == "broker_cmd"


def test_broker_subcommand_uses_the_brokers_own_flags(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["broker", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "usage: kelp broker" in out and "--log-dirs" in out and "--http-port" in out


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["topics", "create"])
    assert exc.value.code == 2
    assert "name" in capsys.readouterr().err
