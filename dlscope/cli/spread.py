"""Options groups: a command takes a frozen dataclass of typer options as one parameter."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

__all__ = ["spread_options"]


def spread_options(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with each parameter typed as an options group spread into the group's own
    options, so that typer shows and parses them one by one and ``command`` gets the group."""
    hints = typing.get_type_hints(command, include_extras=True)
    groups: dict[str, type[Any]] = {}
    parameters: list[inspect.Parameter] = []
    for parameter in inspect.signature(command).parameters.values():
        annotation = hints.get(parameter.name, parameter.annotation)
        if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
            groups[parameter.name] = annotation
            fields = typing.get_type_hints(annotation, include_extras=True)
            parameters += [
                inspect.Parameter(
                    field.name,
                    inspect.Parameter.KEYWORD_ONLY,
                    default=field.default,
                    annotation=fields[field.name],
                )
                for field in dataclasses.fields(annotation)
            ]
        else:
            parameters.append(
                parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=annotation)
            )

    @functools.wraps(command)
    def spread(**given: Any) -> None:
        for name, group in groups.items():
            names = [field.name for field in dataclasses.fields(group)]
            given[name] = group(**{field: given.pop(field) for field in names})
        command(**given)

    # typer reads the signature and the annotations: the spread ones, as objects.
    spread.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    spread.__annotations__ = {p.name: p.annotation for p in parameters}
    return spread
