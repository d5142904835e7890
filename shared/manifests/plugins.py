"""Which custom processing steps are installed: entry points of the ``dlscope.steps`` group.

A manifest never carries code. A step dlscope does not provide is a Python callable that the
operator installs in a distribution declaring, for instance::

    [project.entry-points."dlscope.steps"]
    letterbox = "acme_steps:letterbox"

and a manifest names it with ``{op: plugin, name: letterbox, params: {...}}``. The callable
takes the data and the step's ``params`` mapping and returns the new data.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

__all__ = ["STEP_GROUP", "installed_steps"]

STEP_GROUP = "dlscope.steps"


def installed_steps() -> dict[str, EntryPoint]:
    """The step plugins installed in this environment, by entry-point name."""
    return {ep.name: ep for ep in entry_points(group=STEP_GROUP)}
