"""Data made inert for each place it is written: whatever a manifest, a worker or an error
message carries, it is shown as text and never changes the structure of what shows it.

- ``script_json``: JSON inside a ``<script type="application/json">`` element of a page.
- ``markdown_text``: a value inside a Markdown report (a list item, a heading);
  ``markdown_cell``, one in a table's cell.
- ``spreadsheet_cell``: a value in a CSV report that a spreadsheet will open.

Text and attributes of the HTML pages need nothing here: Jinja autoescapes every template
(``rendering``).
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from markupsafe import Markup

__all__ = ["markdown_cell", "markdown_text", "script_json", "spreadsheet_cell"]

# Inside a script element the HTML parser looks for "</script", but also for "<!--" and
# "<script", which switch it into states where "</script>" no longer ends the element: any
# "<" can start one of them. ">" and "&" are escaped too, so the text is the same whichever
# way a parser reads it, and U+2028/U+2029, which old JavaScript parsers take for newlines.
_SCRIPT_UNSAFE = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_SCRIPT_UNSAFE_RE = re.compile("[<>&\u2028\u2029]")


def script_json(value: Any) -> Markup:
    """``value`` as JSON that can sit inside a script element whatever its strings hold; read
    it back with ``JSON.parse(element.textContent)``. Each escape is JSON's own (``\\u003c``
    is ``<``), so the data reads back unchanged."""
    text = orjson.dumps(value).decode()
    return Markup(_SCRIPT_UNSAFE_RE.sub(lambda m: _SCRIPT_UNSAFE[m.group()], text))


# Markdown reads inline markup anywhere in a line: emphasis ("*", "_"), code ("`"), links
# and images ("[", "]"), raw HTML, comments and autolinks ("<", ">"), entities ("&"), table
# cells ("|"), strikethrough ("~") and a heading's closing "#". A backslash makes each a
# literal character (CommonMark: any ASCII punctuation can be escaped, the backslash too).
# A bare URL that a renderer links shows the URL itself: nothing to forge there.
_MARKDOWN_INLINE = re.compile(r"([\\`*_\[\]<>&|~#])")
# At the start of a line, more: a bullet ("-", "+"; "*" is escaped anyway), a rule or a
# setext underline ("-", "="), an ordered list ("1." or "1)" before a space or the end: a
# version, 1.31.1, or a number, 8.5, opens none). Quotes (">") and headings ("#") are escaped
# wherever they are. A table cell holds inline text only, so opens no block at all.
_MARKDOWN_BLOCK_START = re.compile(r"^([-+=]|\d{1,9}(?=[.)](?:[ \t]|$)))")
# A value is one line: a line break in it would end a table row or a list item and begin a
# block of the value's choosing. Other control characters are shown as nothing anyway.
_LINE_BREAKS = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]+")


def markdown_text(value: object) -> str:
    """``value`` as Markdown text that shows exactly as written: one line, its markup
    characters escaped, nothing a renderer reads as a link, image, HTML, code or cell."""
    return _escape_block_start(markdown_cell(value))


def markdown_cell(value: object) -> str:
    """``value`` as the text of a table cell: ``markdown_text`` but for what only opens a
    block at a line's start, which a cell is never (``-0.3``, ``1.`` stay as written)."""
    text = _LINE_BREAKS.sub(" ", str(value)).strip()
    return _MARKDOWN_INLINE.sub(r"\\\1", text)


def _escape_block_start(text: str) -> str:
    """The value may start a line (a list item's text): escape what would open a block."""
    match = _MARKDOWN_BLOCK_START.match(text)
    if match is None:
        return text
    if match.group().isdigit():  # an ordered list's number: escape the "." or ")" after it
        end = match.end()
        return text[:end] + "\\" + text[end:]
    return "\\" + text


# A spreadsheet reads a cell that starts with one of these as a formula (OWASP, "CSV
# Injection"), including the full-width forms some locales accept.
_FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def spreadsheet_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as written: text that would start a formula gets a
    leading ``'`` (which spreadsheets hide); numbers, booleans and empty cells as they are."""
    if isinstance(value, str) and value.startswith(_FORMULA_PREFIXES):
        return "'" + value
    return value
