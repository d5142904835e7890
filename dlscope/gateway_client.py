"""The CLI as a client of a running gateway: submit a request, then wait for its outcome;
register a manifest with the files it names."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from dlscope.terminal import fail
from shared.artifacts import is_remote, locate
from shared.manifests import DatasetManifest, Manifest, ModelManifest, ModelSource
from shared.processing import read_labels

__all__ = ["gateway_client", "register_manifest", "registration", "submitted", "until_settled"]


def gateway_client(gateway: str, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=gateway, headers=headers, timeout=30)


def submitted(
    client: httpx.Client, gateway: str, path: str, body: dict[str, Any], what: str
) -> dict[str, Any]:
    """POST ``body`` to ``path``; the gateway's acceptance (202), or the CLI fails saying why."""
    try:
        response = client.post(path, json=body)
    except httpx.HTTPError as exc:
        raise fail(f"cannot reach the gateway at {gateway}: {exc}", 2) from exc
    if response.status_code != 202:
        raise fail(f"the gateway refused the {what} ({response.status_code}): {response.text}", 2)
    accepted: dict[str, Any] = response.json()
    return accepted


def until_settled(
    client: httpx.Client, path: str, settled: tuple[str, ...], every_s: float
) -> dict[str, Any]:
    """GET ``path`` until its ``status`` is one of ``settled``."""
    while True:
        response = client.get(path)
        if response.status_code == 200 and response.json()["status"] in settled:
            body: dict[str, Any] = response.json()
            return body
        time.sleep(every_s)  # polling a remote HTTP API: nothing to await locally


def registration(manifest: Manifest) -> tuple[dict[str, Any], dict[str, Path]]:
    """What registering ``manifest`` (read from a file here) with a gateway sends: the manifest
    with each file of this host named by its file name alone, the files to upload by that
    name, and every labels file written out as the list of its names. A deployment reads no
    path of this host (and no other host's path from outside: see the README's Security)."""
    files: dict[str, Path] = {}

    def uploaded(source: ModelSource) -> ModelSource:
        if is_remote(source.uri) or source.uri.startswith("pkg://"):
            return source
        path = locate(source.uri)
        name = path.name
        while files.get(name, path) != path:  # two files of one name: keep both apart
            name = f"_{name}"
        files[name] = path
        return source.model_copy(update={"uri": name})

    body = manifest.model_dump(mode="json")
    if isinstance(manifest, ModelManifest):
        body["source"] = uploaded(manifest.source).model_dump(mode="json", exclude_none=True)
        if manifest.weights is not None:
            body["weights"] = uploaded(manifest.weights).model_dump(mode="json", exclude_none=True)
        for output in body["outputs"]:
            for step in output["steps"]:
                if isinstance(step.get("labels"), str):
                    step["labels"] = list(read_labels(Path(step["labels"])))
    elif isinstance(manifest, DatasetManifest):
        if manifest.source.file is not None:
            file = uploaded(manifest.source.file)
            body["source"] = {**body["source"], "uri": file.uri}
        if isinstance(manifest.labels, str):
            body["labels"] = list(read_labels(Path(manifest.labels)))
    return body, files


def register_manifest(client: httpx.Client, manifest: Manifest) -> httpx.Response:
    """POST ``manifest`` to the gateway's /v1/models, uploading the files it names."""
    body, files = registration(manifest)
    if not files:
        return client.post("/v1/models", json=body)
    with contextlib.ExitStack() as stack:
        parts = [
            ("file", (name, stack.enter_context(path.open("rb")), "application/octet-stream"))
            for name, path in files.items()
        ]
        return client.post(
            "/v1/models",
            files=[("manifest", ("manifest.json", orjson.dumps(body), "application/json")), *parts],
        )
