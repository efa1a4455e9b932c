"""Every `robotrl ...` command in the README's shell blocks parses with today's CLI, so
the recipes a new user copies do not rot as options change."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from robotrl.cli import command_module

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_commands() -> list[str]:
    """The `robotrl` command lines of README.md's ```bash blocks, continuations joined."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [line.strip() for line in lines if line.strip().startswith("robotrl ")]


def parse(command_line: str) -> argparse.Namespace:
    """The command's own parser applied to the line (each $VAR stands for one word)."""
    words = shlex.split(re.sub(r"\$\w+", "x", command_line), comments=True)
    name, rest = words[1], words[2:]
    module = command_module(name)
    parser = argparse.ArgumentParser(prog=f"robotrl {name}")
    module.add_arguments(parser)
    return parser.parse_args(rest)


def test_the_readme_has_its_recipes():
    names = {line.split()[1] for line in readme_commands()}
    assert {"record", "train", "bench", "learn", "serve", "deploy", "actor", "up", "twin"} <= names


@pytest.mark.parametrize("command_line", readme_commands())
def test_a_readme_command_parses(command_line: str, capsys: pytest.CaptureFixture[str]):
    try:
        parse(command_line)
    except SystemExit:
        pytest.fail(f"{command_line!r}: {capsys.readouterr().err.strip()}")


def test_a_wrong_option_is_caught():
    with pytest.raises(SystemExit):
        parse("robotrl train --dataset d --out o --no-such-option 3")
