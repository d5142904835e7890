"""What the docs say, read as a test reads it: their pages, their code blocks, and the
``dlscope`` commands written in them.

A page's fenced block is run by the docs tests when its language is a shell's (``sh``,
``bash``, ``console``); a block marked ``text`` is a map or an output, read but never run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from shared.config import REPOSITORY_ROOT

__all__ = ["DOCS", "PAGES", "SHELLS", "Block", "blocks", "commands", "dlscope_commands"]

DOCS = REPOSITORY_ROOT / "docs"
# Every page the docs have, the README among them.
PAGES = (REPOSITORY_ROOT / "README.md", *sorted(DOCS.glob("*.md")))
SHELLS = frozenset({"sh", "bash", "console"})

_FENCE = re.compile(r"^```(\w*)\s*$")
_INLINE = re.compile(r"`([^`\n]+)`")


@dataclass(frozen=True)
class Block:
    """One fenced block: its page, the line its fence opens on, its language, its text."""

    page: Path
    line: int
    language: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.page.name}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page``, in order."""
    found: list[Block] = []
    opened: tuple[int, str] | None = None
    body: list[str] = []
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        fence = _FENCE.match(line)
        if fence is None:
            if opened is not None:
                body.append(line)
        elif opened is None:
            opened, body = (number, fence.group(1)), []
        else:
            found.append(Block(page, opened[0], opened[1], "\n".join(body) + "\n"))
            opened = None
    assert opened is None, f"{page.name}:{opened[0]}: a code block that never closes"
    return found


def commands(text: str) -> list[str]:
    """The shell commands of a block: its lines with their continuations (a trailing ``\\``)
    joined, blank lines and whole-line comments left out."""
    joined: list[str] = []
    pending = ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        command = (pending + line).strip()
        pending = ""
        if command and not command.startswith("#"):
            joined.append(command)
    return joined


def dlscope_commands(page: Path) -> Iterator[str]:
    """Every ``dlscope …`` command ``page`` writes, in its code blocks (whatever their
    language) and its inline code."""
    fenced = blocks(page)
    for block in fenced:
        yield from (c for c in commands(block.text) if _names_dlscope(c))
    prose = page.read_text()
    for block in fenced:  # inline code outside the blocks only
        prose = prose.replace(block.text, "")
    for span in _INLINE.findall(prose):
        if _names_dlscope(span):
            yield span


def _names_dlscope(command: str) -> bool:
    return any(word == "dlscope" or word.endswith("/dlscope") for word in command.split())
