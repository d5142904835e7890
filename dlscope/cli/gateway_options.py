"""The options that point a command at a running deployment, declared once: ``--gateway``
(``DLSCOPE_GATEWAY_URL``) and ``--token`` (``DLSCOPE_API_TOKEN``).

``Gateway`` and ``Token`` are the options as most commands take them: without a gateway, the
command works on the embedded dlscope here. A command that says something else of its own
(what it does without a gateway, or that it needs one) declares its help with
``gateway_option`` and ``token_option``, so the flag and its variable still come from here.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

__all__ = ["GATEWAY_ENV", "TOKEN_ENV", "Gateway", "Token", "gateway_option", "token_option"]

GATEWAY_ENV = "DLSCOPE_GATEWAY_URL"
TOKEN_ENV = "DLSCOPE_API_TOKEN"


def gateway_option(help: str | None = None) -> Any:
    """``--gateway``, read from ``DLSCOPE_GATEWAY_URL`` when not given."""
    return typer.Option(envvar=GATEWAY_ENV, help=help)


def token_option(help: str | None = None) -> Any:
    """``--token``, the gateway's bearer token, read from ``DLSCOPE_API_TOKEN``."""
    return typer.Option(envvar=TOKEN_ENV, help=help)


Gateway = Annotated[str | None, gateway_option("a running gateway; default: embedded")]
Token = Annotated[str | None, token_option()]
