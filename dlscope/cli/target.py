"""Which dlscope a command talks to: the deployment behind ``--gateway``, or, without one,
the embedded dlscope in this process.

Apart from ``dlscope.cli.client`` on purpose: both clients import that module for the types
they answer with, and choosing between them imports both, so the choice sits above them.
"""

from __future__ import annotations

from dlscope.cli.client import Client
from shared.config import Settings

__all__ = ["client_for"]


def client_for(gateway: str | None, token: str | None, settings: Settings | None = None) -> Client:
    """The deployment behind ``gateway``, or, without one, the embedded dlscope here (with
    ``settings``, else the environment's)."""
    # Imported on use: the embedded client brings every service with it, which a command
    # that talks to a gateway has no need to import.
    if gateway:
        from dlscope.cli.http import HttpClient

        return HttpClient(gateway, token)
    from dlscope.cli.embedded_client import EmbeddedClient

    return EmbeddedClient(settings)
