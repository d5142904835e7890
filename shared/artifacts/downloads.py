"""Streaming an ``http(s)://`` source, bounded in size and time, with errors a user can act on."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import httpx

from shared.artifacts.digests import CHUNK
from shared.artifacts.limits import ArtifactLimits
from shared.artifacts.served import SERVER_HEADER
from shared.errors import ArtifactError

__all__ = ["download"]

# The sha256 pins the file's bytes: ask for them as stored, not re-encoded on the way, so
# Content-Length is the size of the file itself.
_HEADERS = {"Accept-Encoding": "identity"}
# How much of a refusal's text is quoted in the error.
_EXPLANATION_BYTES = 500


@contextmanager
def download(
    uri: str, limits: ArtifactLimits, headers: Mapping[str, str] | None = None
) -> Iterator[Iterator[bytes]]:
    """The body of ``uri``, chunk by chunk; every failure becomes an ``ArtifactError``.
    ``headers`` go with the request (a token, for dlscope's own artifact server).

    httpx errors raised while the caller iterates the chunks surface here too, so they are
    translated whether they happen on connecting or halfway through the body.
    """
    timeout = limits.download_timeout_s
    try:
        with (
            httpx.Client(
                timeout=httpx.Timeout(timeout),
                # A token is for the server it was given for: a redirect elsewhere would
                # hand it on, so a guarded request does not follow one.
                follow_redirects=not headers,
                headers={**_HEADERS, **(headers or {})},
            ) as client,
            client.stream("GET", uri) as response,
        ):
            if not response.is_success:
                raise ArtifactError(
                    f"{uri}: download failed with HTTP {response.status_code} "
                    f"{response.reason_phrase}{_explanation(response)}"
                )
            declared = response.headers.get("Content-Length", "")
            if declared.isdigit() and int(declared) > limits.max_download_bytes:
                raise ArtifactError(
                    f"{uri}: too large to download: Content-Length is {int(declared)} bytes, "
                    f"over the limit of {limits.max_download_bytes} (max_download_bytes)"
                )
            yield _capped(response.iter_bytes(CHUNK), uri, limits.max_download_bytes)
    except httpx.TimeoutException as exc:
        raise ArtifactError(
            f"{uri}: download timed out ({type(exc).__name__}: no progress for {timeout} s)"
        ) from exc
    except httpx.ConnectError as exc:
        raise ArtifactError(f"{uri}: cannot connect to the server: {exc}") from exc
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise ArtifactError(f"{uri}: download failed: {type(exc).__name__}: {exc}") from exc


def _explanation(response: httpx.Response) -> str:
    """dlscope's artifact server's own words on a refusal (which file is missing, and why):
    quoted, short. Any other server's body is not: it may be anything, for anyone."""
    if SERVER_HEADER not in response.headers:
        return ""
    if not response.headers.get("Content-Type", "").startswith("text/plain"):
        return ""
    body = b""
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) >= _EXPLANATION_BYTES:
            break
    text = " ".join(body[:_EXPLANATION_BYTES].decode("utf-8", "replace").split())
    return f": {text}" if text else ""


def _capped(chunks: Iterator[bytes], uri: str, limit: int) -> Iterator[bytes]:
    # Content-Length may be absent or wrong; the bytes actually received are what fill a disk.
    received = 0
    for chunk in chunks:
        received += len(chunk)
        if received > limit:
            raise ArtifactError(
                f"{uri}: too large to download: more than {limit} bytes received "
                "(max_download_bytes)"
            )
        yield chunk
