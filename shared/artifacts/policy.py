"""Which files a manifest registered from outside may name: checked before any is read.

A registration that reaches the registry over HTTP or AMQP comes from someone who cannot read
the registry's host, so its manifest may name only:

- files it uploads with the registration (the registry keeps them, by sha256, in its store);
- ``pkg://<package>/<path>`` resources that stay inside their installed package once the
  path is normalised and its links followed;
- ``http://`` and ``https://`` URLs, which workers download and verify: of the hosts the
  operator lists (``DLSCOPE_REGISTRY_SOURCE_HOSTS``), or, with none listed, of any host but
  the registry's own network (loopback, private and link-local addresses, ``localhost``),
  which a registration would otherwise point a worker at, and learn from its failure what
  answers there;
- paths under folders the operator lists (``DLSCOPE_REGISTRY_SOURCE_ROOTS``, empty by
  default), links followed.

Anything else (``/etc/passwd``, ``file:///home/...``, ``pkg://onnx/../../..``) is refused
with the rule it breaks and without touching the file, so the refusal says nothing about
whether the file exists or what it holds (the cautionary tale: MLflow's CVE-2023-1177, where
a registered model's source read any file of the server). A local user registering on their
own machine (the embedded mode) may name any path they can read.

The artifact server applies the same rule again before serving a file, so a manifest in the
log from before this check (or one registered locally) never makes it serve anything else.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from shared.artifacts.sources import is_remote, locate
from shared.errors import ArtifactError

__all__ = ["SourcePolicy", "is_upload"]


def is_upload(uri: str) -> bool:
    """Whether ``uri`` names a file uploaded with the registration: a relative path, with no
    scheme (the name it was uploaded under, or any: uploads are matched by sha256)."""
    return urlparse(uri).scheme == "" and not os.path.isabs(uri)


@dataclass(frozen=True)
class SourcePolicy:
    """The rule for one registry. ``roots``: folders whose files may be named by path (the
    operator's, and the registry's own upload store); ``hosts``: the hosts whose URLs may be
    named (empty: any outside this network); ``local_paths``: any path and any host (a local
    user's own registration)."""

    roots: tuple[Path, ...] = ()
    local_paths: bool = False
    hosts: tuple[str, ...] = ()

    def check(self, uri: str, *, what: str = "a source") -> None:
        """Raise ``ArtifactError`` unless ``uri`` may be named; reads nothing but links."""
        parsed = urlparse(uri)
        if is_remote(uri):
            if not self.local_paths:
                self._trusted_host(uri)
            return
        if parsed.scheme == "pkg":
            self._inside_package(uri)
            return
        if parsed.scheme not in ("", "file"):
            raise ArtifactError(
                f"{uri}: {what} may be an uploaded file, pkg://, http:// or https://, not "
                f"{parsed.scheme}://"
            )
        if is_upload(uri):
            raise ArtifactError(
                f"{uri}: a relative path names a file uploaded with the registration, and none was"
            )
        if self.local_paths:
            return
        path = Path(unquote(parsed.path) if parsed.scheme == "file" else uri)
        if not any(_within(path, root) for root in self.roots):
            raise ArtifactError(
                f"{uri}: the registry does not read files named by path from outside; "
                "upload the file with the registration (dlscope models register --gateway "
                "does), name it by https:// URL, or have the operator list its folder in "
                "DLSCOPE_REGISTRY_SOURCE_ROOTS"
            )

    def servable(self, uri: str) -> bool:
        """Whether the artifact server may serve the local file ``uri`` names: the rule
        above, whoever registered it (a local user's own paths are not served to others)."""
        try:
            SourcePolicy(self.roots).check(uri)
        except ArtifactError:
            return False
        return not is_remote(uri)

    def _trusted_host(self, uri: str) -> None:
        parsed = urlparse(uri)
        host = (parsed.hostname or "").lower()
        if self.hosts:
            if host in self.hosts or parsed.netloc.rpartition("@")[2].lower() in self.hosts:
                return
            raise ArtifactError(
                f"{uri}: {host or 'no host'} is not among the hosts a registration may name "
                "(DLSCOPE_REGISTRY_SOURCE_HOSTS); upload the file with the registration instead"
            )
        if _inside_this_network(host):
            raise ArtifactError(
                f"{uri}: {host or 'no host'} is an address of the registry's own network, "
                "which a registration may not point workers at; upload the file with the "
                "registration, or have the operator list the host in "
                "DLSCOPE_REGISTRY_SOURCE_HOSTS"
            )

    @staticmethod
    def _inside_package(uri: str) -> None:
        package = urlparse(uri).netloc
        if not all(part.isidentifier() for part in package.split(".")):
            raise ArtifactError(f"{uri}: {package!r} is not the name of a Python package")
        # locate() refuses a path that leaves its package, links followed.
        locate(uri)


def _inside_this_network(host: str) -> bool:
    """Whether ``host`` names this machine or its private network: by name (localhost) or
    as an address that is not a public one (loopback, private, link-local, unspecified)."""
    if not host or host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False  # a name: resolved by the worker, where the operator's DNS applies
    return not address.is_global


def _within(path: Path, root: Path) -> bool:
    # Links followed on both sides: a link inside a root to a file outside it is outside.
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))
