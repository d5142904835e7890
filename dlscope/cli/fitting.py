"""Tables that fit the terminal, one row per member (an experiment's framework, a sweep's
load, a repetition), and that show what they are given as written.

Where every column's longest word fits side by side, and no cell would be folded into more
than a few lines, a member is a row of one table. Narrower, where rich would cut each cell
to ``onn…`` (an experiment at 80 columns), each member is a block of its own instead, its
name on a line and one line per column below, so that every name and every figure is shown
whole at any width.

Every cell, title and caption is a ``Text``: a string is taken as written, never read as
rich markup, so ``pip install 'dlscope[tensorrt]'`` keeps its brackets. A cell that is meant
to be coloured is a ``Text`` with its style (``styled``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

__all__ = ["Cell", "Column", "Fitted", "styled", "text"]

# Measured this wide, a cell's text is as if the terminal had no edge (rich clamps to it).
_UNCLAMPED = 10_000
# The most lines a cell of the wide table may take before a block per member reads better.
_TALLEST = 3

Cell = str | Text


def text(value: Cell) -> Text:
    """``value`` as text shown as written (a ``Text`` stays as it is, styles and all)."""
    return value if isinstance(value, Text) else Text(value)


def styled(value: str, style: str, rest: str = "") -> Text:
    """``value`` in ``style``, then ``rest`` plain: a coloured cell that is still literal."""
    return Text.assemble((value, style), rest)


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    justify: Literal["left", "right"] = "left"


@dataclass(frozen=True, slots=True)
class Fitted:
    """A table of members that fits: ``rows`` are the members' cells, one per column;
    ``names`` each member's name, the heading of its block where the terminal is narrow, in
    place of its first ``named`` cells."""

    title: Cell
    columns: Sequence[Column]
    rows: Sequence[Sequence[Cell]]
    names: Sequence[Cell]
    named: int = 1
    caption: Cell | None = None

    def table(self, widths: Sequence[int] | None = None) -> Table:
        """Every member a row: the table wide terminals get, its columns ``widths`` wide
        (their text, padding aside) where given."""
        table = Table(
            title=text(self.title),
            caption=None if self.caption is None else text(self.caption),
            caption_justify="left",
        )
        for index, column in enumerate(self.columns):
            width = None if widths is None else widths[index]
            table.add_column(text(column.header), justify=column.justify, width=width)
        for row in self.rows:
            table.add_row(*(text(cell) for cell in row))
        return table

    def blocks(self) -> Group:
        """Every member a block: its name, then a line for each of its other columns."""
        parts: list[RenderableType] = [Text.assemble(text(self.title), style="bold")]
        for name, row in zip(self.names, self.rows, strict=True):
            block = Table.grid(padding=(0, 2))
            block.add_column(no_wrap=True, style="dim")
            block.add_column(overflow="fold")
            for column, cell in list(zip(self.columns, row, strict=True))[self.named :]:
                block.add_row(text(column.header), text(cell))
            parts += [Text(), Text.assemble(text(name), style="bold"), block]
        if self.caption is not None:
            parts += [Text(), text(self.caption)]
        return Group(*parts)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths = self._widths(console, options)
        yield self.blocks() if widths is None else self.table(widths)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table())

    def _widths(self, console: Console, options: ConsoleOptions) -> list[int] | None:
        """Each column's width in a table ``options.max_width`` wide: at least its longest
        word, then what is left shared out toward each column's whole text; None where the
        longest words do not fit side by side. Rich's own sharing narrows the widest columns
        first, below their longest word, which it then cuts to "…"."""
        unclamped = options.update_width(_UNCLAMPED)
        least, most = [], []
        for index, column in enumerate(self.columns):
            cells = [text(column.header), *(text(row[index]) for row in self.rows)]
            measured = [Measurement.get(console, unclamped, cell) for cell in cells]
            least.append(max(m.minimum for m in measured))
            most.append(max(m.maximum for m in measured))
        # A cell's padding (one space each side) and the borders: one between columns, one
        # at each edge.
        room = options.max_width - 3 * len(self.columns) - 1
        widths = list(least)
        if sum(widths) > room:
            return None
        # The columns that need least to hold their text on one line get it first: as many
        # cells as can be are one line, the long texts (a parity, a reason) wrap.
        for i in sorted(range(len(widths)), key=lambda i: most[i] - least[i]):
            widths[i] += min(most[i] - least[i], room - sum(widths))
        # A cell folded into a tall column of words reads worse than a block per member.
        if any(need > _TALLEST * width for need, width in zip(most, widths, strict=True)):
            return None
        return widths
