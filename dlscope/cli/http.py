"""The command line as a client of a running deployment: one HTTP client to its gateway for
every command, and what registering a manifest of this host uploads."""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson

from dlscope.cli.client import (
    LAYERS_TOP,
    REPORT_FORMATS,
    Compared,
    Evaluated,
    LayersWanted,
    ModelFilter,
    ModelRow,
)
from dlscope.cli.terminal import console, fail, progress
from dlscope.cli.trace import trace_fields
from shared.artifacts import is_remote, locate
from shared.breakdown import LayerReport
from shared.errors import DlscopeError
from shared.manifests import DatasetManifest, Manifest, ModelManifest, ModelSource
from shared.messages import (
    DEFAULT_TRACE_LEVEL,
    DEFAULT_TRACE_QUERIES,
    DeviceLease,
    EvaluationRequested,
    ExperimentComparison,
    ExperimentRequested,
    MemberResult,
)
from shared.messages.tracing import profiled_levels
from shared.processing import read_labels

__all__ = ["HttpClient", "registration"]


class HttpClient:
    """A running deployment, through its gateway's HTTP API (``DLSCOPE_GATEWAY_URL``)."""

    def __init__(self, gateway: str, token: str | None, *, timeout_s: float = 30) -> None:
        self.gateway = gateway
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=gateway, headers=headers, timeout=timeout_s)

    def call(
        self, method: str, path: str, *, ok: tuple[int, ...] = (200,), **kwargs: Any
    ) -> httpx.Response:
        """The gateway's answer to one request. The command fails with exit 2 when the gateway
        cannot be reached, with 1 when it answers otherwise than ``ok``."""
        response = self._send(lambda: self._http.request(method, path, **kwargs))
        if response.status_code not in ok:
            raise fail(f"the gateway answered {response.status_code}: {_detail(response)}", 1)
        return response

    def _send(self, send: Any) -> httpx.Response:
        try:
            response: httpx.Response = send()
        except httpx.HTTPError as exc:
            raise fail(f"cannot reach the gateway at {self.gateway}: {exc}", 2) from exc
        return response

    # The Client interface (dlscope.cli.client).

    def models(self, wanted: ModelFilter) -> list[ModelRow]:
        params = {"framework": wanted.framework, "task": wanted.task, "name": wanted.name}
        query = {k: v for k, v in params.items() if v is not None}
        query["include_deprecated"] = str(wanted.include_deprecated).lower()
        # The gateway's model document has a field of each name a row has.
        columns = [column.name for column in dataclasses.fields(ModelRow)]
        return [
            ModelRow(**{column: m[column] for column in columns})
            for m in self.call("GET", "/v1/models", params=query).json()
        ]

    def register(self, manifest: ModelManifest, what: str) -> bool:
        try:
            response = self._send(lambda: register_manifest(self._http, manifest))
        except DlscopeError as exc:  # a file it names cannot be read here
            raise fail(f"{what}: {exc}", 2) from exc
        if response.status_code not in (200, 201):
            raise fail(f"{what}: refused ({response.status_code}): {_detail(response)}", 1)
        return bool(response.json()["created"])

    def deprecate(self, name: str, version: str, reason: str) -> None:
        path = f"/v1/models/{name}/{version}/deprecate"
        response = self._send(lambda: self._http.post(path, json={"reason": reason}))
        if response.status_code != 204:
            raise fail(f"refused ({response.status_code}): {_detail(response)}", 1)

    def report(self, keys: list[uuid.UUID]) -> dict[str, str]:
        written = {}
        with progress() as bar:
            task = bar.add_task("asking the gateway", total=len(REPORT_FORMATS))
            for fmt in REPORT_FORMATS:
                bar.update(task, description=f"fetching the {fmt} report")
                query = {"id": [str(k) for k in keys], "format": fmt}
                # A report of many runs takes the gateway a while to draw.
                written[fmt] = self.call("GET", "/v1/reports", params=query, timeout=120).text
                bar.advance(task)
        return written

    def layers(self, wanted: LayersWanted) -> dict[str, Any]:
        params: dict[str, Any] = {"top": wanted.top, "compare": [str(i) for i in wanted.others]}
        if wanted.level is not None:
            params["level"] = wanted.level
        path = f"/v1/evaluations/{wanted.evaluation_id}/layers"
        body = self.call("GET", path, params=params).json()
        answer: dict[str, Any] = LayerReport.model_validate(body).model_dump(mode="json")
        return answer

    def _profiled(self, evaluation_id: uuid.UUID | str) -> dict[str, Any] | None:
        """An evaluation's layer breakdown, or None where it has none (not profiled, or
        a profiler that captured nothing): its absence is not the command's failure."""
        path = f"/v1/evaluations/{evaluation_id}/layers"
        response = self._send(lambda: self._http.get(path, params={"top": LAYERS_TOP}))
        if response.status_code != 200:
            return None
        answer: dict[str, Any] = LayerReport.model_validate(response.json()).model_dump(mode="json")
        return answer

    def evaluate(self, request: EvaluationRequested, *, wait: bool) -> Evaluated | None:
        body = {
            "model": request.model,
            "version": request.model_version,
            "framework": request.framework,
            "framework_version": request.framework_version,
            "hardware": request.hardware,
            "scenario": request.scenario.model_dump(mode="json", exclude_unset=True),
            "dataset": request.dataset,
            "split": request.split,
            # Only what differs from the defaults: a gateway that predates a field refuses it.
            **({"trace_level": request.trace_level} if _traced(request) else {}),
            **(
                {"trace_queries": request.trace_queries}
                if request.trace_queries != DEFAULT_TRACE_QUERIES
                else {}
            ),
            **({"concurrent": True} if request.concurrent else {}),
            **({"sweep": request.sweep.model_dump(mode="json")} if request.sweep else {}),
        }
        accepted = self._accepted("/v1/evaluations", body, "evaluation")
        console.print(f"evaluation {accepted['id']} accepted; trace: {_trace(accepted)}")
        if not wait:
            return None
        with console.status("waiting for the evaluation…"):
            path = f"/v1/evaluations/{accepted['id']}"
            evaluation = self._until_settled(path, ("completed", "failed"), every_s=0.2)
        profiled = profiled_levels(request.trace_level) and evaluation["status"] == "completed"
        return Evaluated(
            uuid.UUID(str(accepted["id"])),
            evaluation,
            document=evaluation,
            layers=self._profiled(accepted["id"]) if profiled else None,
        )

    def experiment(self, request: ExperimentRequested, *, wait: bool) -> Compared | None:
        (model,) = request.models
        body = {
            "model": model.model,
            "version": model.version,
            "frameworks": request.frameworks,
            "framework_version": request.framework_version,
            "hardware": request.hardware,
            "scenario": request.scenario.model_dump(mode="json", exclude_unset=True),
            "dataset": request.dataset,
            "split": request.split,
            "tolerance": request.tolerance.model_dump(mode="json"),
            **({"concurrent": True} if request.concurrent else {}),
            **trace_fields(request.trace_level, request.trace_queries),
        }
        accepted = self._accepted("/v1/experiments", body, "experiment")
        models = ", ".join(ref["model"] for ref in accepted["models"])
        console.print(
            f"experiment {accepted['id']} accepted ({models}); trace: {_trace(accepted)}",
            soft_wrap=True,
        )
        if not wait:
            return None
        with console.status("waiting for every member and the comparison…"):
            path = f"/v1/experiments/{accepted['id']}"
            experiment = self._until_settled(path, ("compared", "failed"), every_s=0.5)
        comparison = (
            None
            if experiment["status"] == "failed"
            else ExperimentComparison.model_validate(experiment["comparison"])
        )
        return Compared(
            model=experiment["model"],
            hardware=experiment["hardware"],
            comparison=comparison,
            error=experiment.get("error"),
            experiment_id=uuid.UUID(str(accepted["id"])),
            document=experiment,
            windows={} if comparison is None else self._windows(comparison.evaluations),
            layers={}
            if comparison is None or not profiled_levels(request.trace_level)
            else {
                member.evaluation_id: found
                for member in comparison.evaluations
                if member.status == "completed"
                and (found := self._profiled(member.evaluation_id)) is not None
            },
        )

    def _accepted(self, path: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        """POST ``body``; the gateway's acceptance (202), or the command fails saying why."""
        response = self._send(lambda: self._http.post(path, json=body))
        if response.status_code != 202:
            raise fail(
                f"the gateway refused the {what} ({response.status_code}): {response.text}", 2
            )
        accepted: dict[str, Any] = response.json()
        return accepted

    def _until_settled(self, path: str, settled: tuple[str, ...], *, every_s: float) -> Any:
        """GET ``path`` until its ``status`` is one of ``settled``."""
        while True:
            response = self._send(lambda: self._http.get(path))
            if response.status_code == 200 and response.json()["status"] in settled:
                return response.json()
            time.sleep(every_s)  # polling a remote HTTP API: nothing to await locally

    def _windows(self, members: list[MemberResult]) -> dict[uuid.UUID, DeviceLease]:
        """Each measured member's device and window, from its evaluation.measured event."""
        windows = {}
        for member in members:
            if member.status != "completed":
                continue
            try:
                response = self._http.get(f"/v1/evaluations/{member.evaluation_id}/events")
            except httpx.HTTPError:  # the table is printed; the order is a footnote
                break
            if response.status_code != 200:
                continue
            measured = [e for e in response.json() if e["type"] == "evaluation.measured"]
            lease = measured[-1]["payload"].get("lease") if measured else None
            if lease is not None:
                windows[member.evaluation_id] = DeviceLease.model_validate(lease)
        return windows

    def close(self) -> None:
        self._http.close()


def _trace(accepted: dict[str, Any]) -> str:
    """The trace's link where the deployment exports to a collector, else its id."""
    return str(accepted.get("trace_url") or accepted["trace_id"])


def _traced(request: EvaluationRequested) -> bool:
    return bool(request.trace_level != DEFAULT_TRACE_LEVEL)


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text
    return str(body.get("detail", response.text)) if isinstance(body, dict) else response.text


def registration(manifest: Manifest) -> tuple[dict[str, Any], dict[str, Path]]:
    """What registering ``manifest`` (read from a file here) with a gateway sends: the manifest
    with each file of this host named by its file name alone, the files to upload by that
    name, and every labels file written out as the list of its names. A deployment reads no
    path of this host (and no other host's path from outside: see docs/security.md)."""
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
        for role, source in manifest.sources.items():
            field = "source" if role == "graph" else role  # weights, tokenizer
            body[field] = uploaded(source).model_dump(mode="json", exclude_none=True)
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
