"""Secure by default: what listens beyond this host without a token, and only when asked.

A service that answers HTTP (the gateway, the registry's artifact server) may listen on an
address other hosts reach only with a token (``DLSCOPE_API_TOKEN``; the artifact server's
own ``DLSCOPE_ARTIFACT_TOKEN``, or the API token) or with the operator's explicit
``DLSCOPE_ALLOW_UNAUTHENTICATED=true``, which is logged as a warning at every start: a
benchmarking service runs on shared machines next to private models, and what it would serve
to anyone who asks is the registry, its files and every result.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging

from shared.config import Settings
from shared.errors import ConfigurationError

__all__ = ["check_exposure", "is_loopback", "same_token"]

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` reaches this machine alone."""
    if host.strip("[]") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: whatever it resolves to may be reachable from outside
        return False


def check_exposure(
    host: str, settings: Settings, what: str, *, token: str | None, setting: str
) -> None:
    """Raise ``ConfigurationError`` if ``what`` would listen on ``host`` beyond loopback with
    no ``token`` (from ``setting``) and no opt-in; warn when the opt-in allows it."""
    if token or is_loopback(host):
        return
    if not settings.allow_unauthenticated:
        raise ConfigurationError(
            f"the {what} would listen on {host}, which other hosts reach, with no token: "
            f"anyone who reaches it could read what it serves. Set {setting}, listen on "
            "127.0.0.1, or set DLSCOPE_ALLOW_UNAUTHENTICATED=true to open it anyway"
        )
    log.warning(
        "the %s listens on %s with no token (DLSCOPE_ALLOW_UNAUTHENTICATED=true): anyone who "
        "reaches it can read what it serves",
        what,
        host,
    )


def same_token(offered: str | None, expected: str) -> bool:
    """Whether ``offered`` is the token, compared in constant time (no timing tells how much
    of a guess was right)."""
    return offered is not None and hmac.compare_digest(offered.encode(), expected.encode())
