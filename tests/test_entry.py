"""Ctrl-C at any point before the service's own handler is in place ends the command with one
line and status 130, not a traceback: CI's drill once sent it while argparse was building the
command's parser (stop 74), which no handler covered then."""

from __future__ import annotations

import pytest

from ops import cli, entry


def interrupted(*_) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("main", [entry.main, cli.main], ids=["router-backend", "ops.cli"])
def test_ctrl_c_while_the_parser_is_built_ends_with_one_line(monkeypatch, capsys, main):
    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert main() == 130
    captured = capsys.readouterr()
    assert captured.err == "router-backend: interrupted\n"
    assert captured.out == ""

