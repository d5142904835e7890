"""Bounds on what dlscope takes from outside: text and list lengths, and characters no
store can keep.

Two kinds of bound, kept apart on purpose:

- **Field bounds** (here): how long a string or a list in a wire contract, an HTTP body or a
  manifest may be. They are part of the contract, like a field's type: the gateway, every
  service and a direct AMQP publisher on another host must agree on them, so they are
  constants documented in the OpenAPI document (``maxLength``/``maxItems``) and docs/security.md,
  not per-process settings. A value past one is refused with the field and the limit named.
- **Size bounds** (``shared.config.Settings``: ``max_body_bytes``, ``max_upload_bytes``,
  ``max_message_bytes``, ``max_manifest_nodes``): how many bytes a request, an upload, a
  message or a stored event may take. Those depend on the deployment and are settings.

PostgreSQL refuses NUL (U+0000) in text, and no encoder writes an unpaired surrogate
(U+D800-U+DFFF): a string holding either would fail deep inside a store, as a server error,
long after it was accepted. ``unsafe_text`` finds such a string anywhere in parsed data, so
every entry point (HTTP query, path and body; YAML manifests; AMQP envelopes) refuses it up
front, naming where it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field

__all__ = [
    "BOUNDED",
    "MAX_COUNT",
    "MAX_DESCRIPTION",
    "MAX_ITEMS",
    "MAX_LABELS",
    "MAX_NAME",
    "MAX_QUOTE",
    "MAX_REASON",
    "MAX_SEED",
    "MAX_TEXT",
    "REQUESTED",
    "Count",
    "Name",
    "Reason",
    "Text",
    "cleaned",
    "quote",
    "shorten",
    "unsafe_text",
]

# Names and identifiers: model and dataset names, agent ids, versions and constraints.
MAX_NAME = 256
# Any other string a contract holds, unless its field says otherwise.
MAX_TEXT = 4096
# Free text people write: a model's description, a deprecation's reason.
MAX_DESCRIPTION = 65_536
# Why something failed: long enough for a build log's first lines, short enough to store.
MAX_REASON = 8192
# Items of a list in a request or a manifest (steps, inputs, references, dimensions…).
MAX_ITEMS = 1024
# Class names of a classifier: ImageNet-21k has 21 841.
MAX_LABELS = 100_000
# How much of a refused value an error message quotes back.
MAX_QUOTE = 80

# The model configuration of every bounded contract: no string anywhere in it (list items and
# mapping keys and values included) longer than MAX_TEXT unless its field says otherwise.
BOUNDED = ConfigDict(frozen=True, extra="forbid", str_max_length=MAX_TEXT)
# What a user asks for: bounded, and every number in it finite. NaN compares false with every
# bound (so "gt=0" lets it through) and Infinity meets "gt=0": neither may reach a plan, a
# column or a 422 that must be written back as JSON.
REQUESTED = ConfigDict(**BOUNDED, allow_inf_nan=False)
# The largest count a contract takes where a store column keeps it (an attempt, a schema
# version): what a PostgreSQL integer holds. One past it would pass the contract and fail the
# transaction that stores it, with every other event that shared it (issue 42).
MAX_COUNT = 2**31 - 1
# The largest integer a seed may be: what a signed 64-bit column, orjson and numpy all hold.
MAX_SEED = 2**63 - 1

Name = Annotated[str, Field(max_length=MAX_NAME)]
Text = Annotated[str, Field(max_length=MAX_TEXT)]
# A count from 1 that a store column keeps (an attempt, a schema version).
Count = Annotated[int, Field(ge=1, le=MAX_COUNT)]

_UNSAFE = re.compile("[\x00\ud800-\udfff]")


def unsafe_text(
    data: Any, where: tuple[str | int, ...] = ()
) -> tuple[tuple[str | int, ...], str] | None:
    """Where in ``data`` (parsed JSON or YAML) a string (or a mapping key) holds NUL or an
    unpaired surrogate, and what: ``(path, description)``; None when there is none."""
    if isinstance(data, str):
        found = _UNSAFE.search(data)
        if found is None:
            return None
        what = (
            "a NUL character (U+0000)"
            if found.group() == "\x00"
            else (f"an unpaired surrogate (U+{ord(found.group()):04X}), which is not Unicode text")
        )
        return where, what
    if isinstance(data, Mapping):
        for key, value in data.items():
            if isinstance(key, str) and (problem := unsafe_text(key, (*where, key))):
                return problem[0], f"a key with {problem[1]}"
            if problem := unsafe_text(value, (*where, str(key))):
                return problem
        return None
    if isinstance(data, Sequence) and not isinstance(data, bytes | bytearray):
        for index, item in enumerate(data):
            if problem := unsafe_text(item, (*where, index)):
                return problem
    return None


def cleaned(text: str) -> str:
    """``text`` with every NUL and unpaired surrogate replaced by U+FFFD: text taken from a
    server (its error, its model names) is data to keep, not a request to refuse, and a
    measurement holding it as it came could be read by no consumer (issue 42)."""
    return _UNSAFE.sub("\ufffd", text) if _UNSAFE.search(text) else text


def shorten(text: str, limit: int = MAX_REASON) -> str:
    """``text``, cut to at most ``limit`` characters with a note of how much was cut."""
    if len(text) <= limit:
        return text
    note = f"… ({len(text) - limit} more characters cut)"
    return text[: max(0, limit - len(note))] + note


def _shortened(value: object) -> object:
    return shorten(cleaned(value)) if isinstance(value, str) else value


# Why something failed, or was refused: cut to MAX_REASON and cleaned of what no store keeps
# rather than refused, since a reason often quotes what it refuses (a server's answer among
# them), and a failure must be recorded whatever it says.
# (The bound before the validator: after it, pydantic would apply MAX_TEXT to the string too.)
Reason = Annotated[str, Field(max_length=MAX_REASON), BeforeValidator(_shortened)]


def quote(value: object, limit: int = MAX_QUOTE) -> str:
    """``repr(value)``, cut short: what an error message may echo of an input."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"
