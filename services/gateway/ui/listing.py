"""What the list pages read from their query: filters (a value dlscope does not know is a
message, not an empty list) and pages (offset and limit, links to the pages around)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request

from shared.eventstore.views import EVALUATION_STATUSES, EXPERIMENT_STATUSES
from shared.messages import FRAMEWORKS, HARDWARE

__all__ = [
    "PAGE_SIZES",
    "BadQuery",
    "Filters",
    "day",
    "evaluation_filters",
    "experiment_filters",
    "midnight",
    "one_of",
    "pages",
    "paging",
]

PAGE_SIZES = (25, 50, 100, 200)


@dataclass(frozen=True, slots=True)
class Filters:
    model: str | None = None
    framework: str | None = None
    hardware: str | None = None
    status: str | None = None
    since: date | None = None
    until: date | None = None

    @property
    def any(self) -> bool:
        return any(getattr(self, name) is not None for name in self.__slots__)


def midnight(day: date | None) -> datetime | None:
    return None if day is None else datetime.combine(day, datetime.min.time(), UTC)


class BadQuery(Exception):
    """A page's query that cannot work: answered 422 with the page and the message."""


def one_of(query: Mapping[str, str], name: str, allowed: tuple[str, ...]) -> str | None:
    value = query.get(name) or None
    if value is not None and value not in allowed:
        raise BadQuery(f"{name}: unknown value {value!r}; one of {', '.join(allowed)}")
    return value


def day(query: Mapping[str, str], name: str) -> date | None:
    value = query.get(name) or None
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise BadQuery(f"{name}: {value!r} is not a date (YYYY-MM-DD)") from None


def evaluation_filters(query: Mapping[str, str]) -> Filters:
    """The evaluations page's filters: model, framework, hardware, status, requested between."""
    return Filters(
        model=query.get("model") or None,
        framework=one_of(query, "framework", FRAMEWORKS),
        hardware=one_of(query, "hardware", HARDWARE),
        status=one_of(query, "status", EVALUATION_STATUSES),
        since=day(query, "since"),
        until=day(query, "until"),
    )


def experiment_filters(query: Mapping[str, str]) -> Filters:
    """The experiments page's filters: model and status."""
    return Filters(
        model=query.get("model") or None, status=one_of(query, "status", EXPERIMENT_STATUSES)
    )


def paging(query: Mapping[str, str]) -> tuple[int, int]:
    try:
        limit = int(query.get("limit") or 50)
        offset = int(query.get("offset") or 0)
    except ValueError:
        raise BadQuery("limit and offset must be whole numbers") from None
    if not 1 <= limit <= max(PAGE_SIZES) or not 0 <= offset <= 2**31 - 1:
        raise BadQuery(f"limit must be 1 to {max(PAGE_SIZES)} and offset at least 0")
    return limit, offset


def pages(
    request: Request, path: str, limit: int, offset: int, more: bool, shown: int
) -> dict[str, Any]:
    def at(new_offset: int) -> str:
        kept = [(k, v) for k, v in request.query_params.multi_items() if k != "offset" and v]
        return f"{path}?{urlencode([*kept, ('offset', str(new_offset))])}"

    return {
        "limit": limit,
        "first": offset + 1 if shown else 0,
        "last": offset + shown,
        "previous": at(max(0, offset - limit)) if offset > 0 else None,
        "next": at(offset + limit) if more else None,
    }
