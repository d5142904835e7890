"""Semantic versions and version constraints.

Versions are strict semver (``MAJOR.MINOR.PATCH`` with an optional pre-release). Constraints
use PEP 440 specifier syntax (``>=1.2,<2``, ``==1.2.*``, ``~=1.2``); ``*``, ``latest`` or an
empty string matches any version, and a bare version (``1.2.0``) only that one.
"""

from __future__ import annotations

import re

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = ["SEMVER", "matches", "parse_constraint", "parse_version"]

SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


def parse_version(text: str) -> Version:
    if not SEMVER.match(text):
        raise ValueError(f"{text!r} is not a semantic version (MAJOR.MINOR.PATCH, e.g. 1.0.0)")
    try:
        return Version(text)
    except InvalidVersion as exc:  # a semver pre-release PEP 440 cannot order
        raise ValueError(f"{text!r} is not a version dlscope can order: {exc}") from exc


def parse_constraint(text: str) -> SpecifierSet:
    """``text`` as a specifier set: ``*``, ``latest`` or nothing match any version (the newest
    is chosen), and a bare version pins it exactly (``1.0.1`` is ``==1.0.1``)."""
    text = text.strip()
    if text in ("", "*", "latest"):
        return SpecifierSet("")
    if SEMVER.match(text):
        return SpecifierSet(f"=={text}")
    try:
        return SpecifierSet(text)
    except InvalidSpecifier as exc:
        raise ValueError(
            f"{text!r} is not a version constraint (use e.g. '>=1.0,<2', '==1.2.*', an exact "
            "version such as 1.0.1, or latest)"
        ) from exc


def matches(version: str, constraint: str) -> bool:
    return parse_constraint(constraint).contains(Version(version), prereleases=True)
