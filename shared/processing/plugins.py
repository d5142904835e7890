"""Custom steps: callables the operator installed under the ``dlscope.steps`` entry points."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from shared.manifests import plugins
from shared.processing.errors import ProcessingError

__all__ = ["StepFunction", "load_step"]

# Takes the data as the previous step left it and the step's `params`; returns the new data.
# Image data is a numpy array, channels-last (HWC) unless a layout step moved the channels.
StepFunction = Callable[[Any, Mapping[str, Any]], Any]


@functools.cache
def load_step(name: str) -> StepFunction:
    """The plugin called ``name``; cached, since scanning entry points costs milliseconds."""
    installed = plugins.installed_steps()
    if name not in installed:
        raise ProcessingError(
            f"no step plugin {name!r} is installed in entry-point group "
            f"{plugins.STEP_GROUP!r} (installed: {', '.join(sorted(installed)) or 'none'})"
        )
    try:
        function = installed[name].load()
    except Exception as exc:  # whatever importing someone else's module raises
        raise ProcessingError(f"step plugin {name!r} cannot be loaded: {exc}") from exc
    if not callable(function):
        raise ProcessingError(f"step plugin {name!r} is not callable: {function!r}")
    return function  # type: ignore[no-any-return]
