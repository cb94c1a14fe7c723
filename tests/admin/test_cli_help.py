"""The CLI's help reads as text (no reST markup) and names what every option of the
memory commands does."""

from __future__ import annotations

import argparse

import pytest

from sidecar.cli import build_parser


def subparser(parser: argparse.ArgumentParser, *names: str) -> argparse.ArgumentParser:
    for name in names:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def test_the_top_level_help_has_no_rest_markup() -> None:
    assert "``" not in build_parser().format_help()


@pytest.mark.parametrize("action", ["users", "list", "search", "get", "add", "update", "export"])
def test_every_option_of_the_memory_commands_says_what_it_does(action: str) -> None:
    parser = subparser(build_parser(), "memories", action)
    bare = [
        a.option_strings[0]
        for a in parser._actions
        if a.option_strings and not a.help and a.option_strings[0] != "--help"
    ]
    assert bare == [], f"memories {action}: options without help: {bare}"


def test_memories_help_says_which_channel_it_uses() -> None:
    text = " ".join(subparser(build_parser(), "memories").format_help().split())
    assert "admin socket" in text
    assert "directly against the configured store" in text
