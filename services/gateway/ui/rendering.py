"""HTML from the package's Jinja templates, for the web pages and the reports alike.

A chart is drawn in one of two ways, by the ``chart`` function a template is given: on a
page, its Vega-Lite specification goes into the page as JSON for vega-embed to draw in the
browser; in a report, vl-convert renders the same specification to SVG, inlined, so the file
opens anywhere, offline, with no script at all.
"""

from __future__ import annotations

import functools
import html
import itertools
import math
from collections.abc import Callable
from datetime import datetime
from importlib import resources
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup
from pydantic import TypeAdapter, ValidationError

from services.gateway.sweeps import LOAD_UNITS
from services.gateway.ui.charts import Spec
from services.gateway.ui.escaping import script_json
from shared.measurement.statistics import BOUND_LEGEND, BOUND_MARK
from shared.messages.lengths import FixedLength, NormalLengths, TokenLengths, UniformLengths
from shared.messages.replay import Replay

__all__ = [
    "NONE",
    "STATIC",
    "ChartDrawer",
    "embedded_chart",
    "plain_number",
    "render",
    "stylesheet",
    "svg_chart",
]

ChartDrawer = Callable[[Spec], Markup]
STATIC = resources.files("services.gateway.ui") / "static"
_ids = itertools.count()
# Shown for a number that is not there: an en dash, as tables print it.
NONE = "\u2013"


@functools.cache
def _environment() -> Environment:
    environment = Environment(
        loader=PackageLoader("services.gateway.ui", "templates"),
        # Every template is HTML: everything written into one is escaped unless it is
        # Markup, whatever the template's name (not only "*.html", as select_autoescape would).
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    # The one notation of a percentile with too few queries, and its legend (said once).
    environment.globals.update(
        bound_mark=BOUND_MARK, bound_legend=BOUND_LEGEND, load_units=LOAD_UNITS
    )
    environment.filters.update(
        ms=format_ms,
        num=format_number,
        pct=format_percent,
        when=format_when,
        bytes=format_bytes,
        lengths=format_lengths,
        replay=format_replay,
        script_json=script_json,
    )
    return environment


_LENGTHS: TypeAdapter[FixedLength | UniformLengths | NormalLengths] = TypeAdapter(TokenLengths)


def format_lengths(asked: object) -> str:
    """A workload's length distribution as the scenario holds it, in the CLI's words
    (``uniform 64-192``); what is not one is shown as not there."""
    try:
        return str(_LENGTHS.validate_python(asked))
    except ValidationError:
        return NONE


def format_replay(asked: object) -> str:
    """A replayed trace as the scenario holds it, in a line (``replay of 300 requests over
    5.4 s (day.jsonl, sha256 …)``); what is not one is shown as not there."""
    try:
        return str(Replay.model_validate(asked))
    except ValidationError:
        return NONE


def render(template: str, **context: Any) -> str:
    return _environment().get_template(template).render(**context)


@functools.cache
def stylesheet() -> str:
    """The pages' CSS, which a report inlines."""
    return (STATIC / "dlscope.css").read_text(encoding="utf-8")


def embedded_chart(spec: Spec) -> Markup:
    """A placeholder that dlscope.js hands to vega-embed, with the specification beside it
    (``script_json``: no value in it can end or change the script element)."""
    key = f"chart-{next(_ids)}"
    label = html.escape(str(spec.get("description", "chart")))
    return Markup(
        f'<figure class="chart"><div class="vega" id="{key}" role="img" aria-label="{label}">'
        f'<p class="muted">drawing…</p></div>'
        f'<script type="application/json" data-chart-for="{key}">{script_json(spec)}</script>'
        "</figure>"
    )


def svg_chart(spec: Spec) -> Markup:
    """The chart as inline SVG, rendered without a browser."""
    import vl_convert  # a few MB of native code: loaded by the first report, not the gateway

    svg = vl_convert.vegalite_to_svg(spec, vl_version="6.4")
    label = html.escape(str(spec.get("description", "chart")))
    return Markup(f'<figure class="chart" role="img" aria-label="{label}">{svg}</figure>')


def plain_number(value: float, digits: int = 4) -> str:
    """``value`` to ``digits`` significant digits as a plain decimal, as a person writes it:
    85410, 12.35, 0.0001234; never an exponent (``8.541e+04``), no trailing zeros."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    places = max(digits - 1 - math.floor(math.log10(abs(value))), 0)
    text = f"{value:.{places}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def format_ms(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NONE
    return f"{plain_number(value, digits)} ms"


def format_number(value: float | int | None, digits: int = 4) -> str:
    if value is None:
        return NONE
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}g}" if abs(value) < 10**digits else f"{value:,.0f}"


def format_percent(value: float | None, digits: int = 1) -> str:
    return NONE if value is None else f"{value * 100:.{digits}f}%"


def format_when(value: datetime | str | None) -> str:
    if value is None:
        return NONE
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def format_bytes(value: float | int | None) -> str:
    if value is None:
        return NONE
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.3g} {unit}"
        size /= 1024
    return f"{size:.3g} TiB"
