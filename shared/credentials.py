"""Credentials in URLs, kept out of everything dlscope stores or shows.

A server's URL may carry a user and password (``http://user:PASS@host/v1``) or a key in its
query (``?api_key=…``): both work for the requests, and neither may reach an event, a log line,
a failure's reason or a page, all of which outlive the run and are read by people the
credentials are not for (issue 42). ``public_url`` is the URL as it may be shown;
``scrubbed`` takes the secrets a URL holds out of any text that might quote them (an HTTP
library's error message, a server's echo of the request).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

__all__ = ["HIDDEN", "public_url", "scrubbed", "secrets_of"]

# What stands where a secret was.
HIDDEN = "***"
# Query parameters whose values are secrets, by the names servers and gateways use.
_SECRET_PARAMETER = re.compile(r"(key|token|secret|password|passwd|auth|signature|sig)", re.I)


def public_url(url: str) -> str:
    """``url`` without its user and password, and with the values of its secret-looking
    query parameters hidden: what events, logs and pages may show."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return HIDDEN  # not a URL anyone could show safely
    host = parts.netloc.rpartition("@")[2]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(k, HIDDEN if _SECRET_PARAMETER.search(k) else v) for k, v in pairs], safe="*"
        )
    return urlunsplit((parts.scheme, host, parts.path, query, parts.fragment))


def secrets_of(url: str, *others: str | None) -> tuple[str, ...]:
    """The secrets ``url`` holds (its password, its secret query values), and ``others``
    (an API key), each as written and as decoded, longest first. A user name is no secret:
    hidden in URLs, kept in text."""
    found: list[str] = [o for o in others if o]
    try:
        parts = urlsplit(url)
    except ValueError:
        return tuple(found)
    userinfo = parts.netloc.rpartition("@")[0]
    if userinfo:
        found.append(userinfo.partition(":")[2])
    found += [v for k, v in parse_qsl(parts.query) if _SECRET_PARAMETER.search(k)]
    every = {s for f in found for s in (f, unquote(f)) if len(s) >= 3}
    return tuple(sorted(every, key=len, reverse=True))


def scrubbed(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every one of ``secrets`` in it hidden."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, HIDDEN)
    return text
