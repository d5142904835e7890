"""Every flag the docs name in a ``dlscope`` command is one that command takes: checked
against what that command's ``--help`` prints, so a renamed or removed option fails here
rather than in a newcomer's terminal."""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from dlscope.cli.app import app
from tests.docs.pages import PAGES, dlscope_commands

# Where a flag's list ends: the shell takes over, or a comment starts.
_SHELL = re.compile(r"^(\||\|\||&&|&|;|#|>|2>|<|\$\(|\))")
_FLAG = re.compile(r"^\[?(--?[A-Za-z][\w-]*)")
# A flag as --help prints it, in its table of options.
_LISTED = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def resolve(command: str) -> tuple[list[str], bool, list[str]]:
    """The subcommand ``command`` names (its words after ``dlscope``), whether that is a
    group of commands rather than a command, and the flags ``command`` gives it."""
    words = command.split()
    start = next(i for i, w in enumerate(words) if w == "dlscope" or w.endswith("/dlscope"))
    path: list[str] = []
    current: Any = typer.main.get_command(app)
    flags: list[str] = []
    for word in words[start + 1 :]:
        if _SHELL.match(word):
            break
        flag = _FLAG.match(word)
        if flag:
            flags.append(flag.group(1))
        elif hasattr(current, "commands") and not flags and word in current.commands:
            path.append(word)
            current = current.commands[word]
    return path, hasattr(current, "commands"), flags


@functools.cache
def listed(path: tuple[str, ...]) -> frozenset[str]:
    """The flags ``dlscope PATH --help`` prints."""
    shown = CliRunner().invoke(app, [*path, "--help"], terminal_width=240, env={"COLUMNS": "240"})
    assert shown.exit_code == 0, shown.output
    return frozenset(_LISTED.findall(shown.output))


def written() -> list[tuple[str, str]]:
    return [
        (page.name, command) for page in PAGES for command in dict.fromkeys(dlscope_commands(page))
    ]


def test_the_docs_write_dlscope_commands_to_check() -> None:
    pages = {page for page, _ in written()}
    assert {"README.md", "quick-start.md", "language-models.md", "served-models.md"} <= pages


@pytest.mark.parametrize(("page", "command"), written())
def test_every_flag_a_page_gives_dlscope_is_in_that_commands_help(page: str, command: str) -> None:
    path, group, flags = resolve(command)
    if flags:
        named = " ".join(path)
        assert not group, f"{page}: {command!r} gives {flags} to `dlscope {named}`, a group"
    unknown = [flag for flag in flags if flag not in listed(tuple(path))]
    assert not unknown, (
        f"{page}: `dlscope {' '.join(path)} --help` lists no {', '.join(unknown)} "
        f"(written as {command!r})"
    )


# Flags the pages name in passing that belong to other programs: docker's, and vLLM's.
OTHER_PROGRAMS = frozenset({"--build-arg", "--otlp-traces-endpoint"})


def every_command(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, sub in getattr(command, "commands", {}).items():
        found += every_command(sub, (*path, name))
    return found


def test_every_flag_the_prose_names_is_one_some_dlscope_command_takes() -> None:
    # A flag written alone in the text (`--max-spread`), not in a whole command.
    known = set().union(*(listed(path) for path in every_command(typer.main.get_command(app))))
    named = {
        (page.name, flag)
        for page in PAGES
        for flag in re.findall(r"`(--[A-Za-z][\w-]*)[^`]*`", page.read_text())
    }
    unknown = sorted(n for n in named if n[1] not in known | OTHER_PROGRAMS)
    assert not unknown, f"flags no `dlscope … --help` lists: {unknown}"
