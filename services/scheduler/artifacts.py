"""What a job tells its worker about the files it needs, given where the worker runs.

A worker on the scheduler's own host can read the manifest's files where they are. One on
another host shares no filesystem with the control plane. With an artifact server
(``DLSCOPE_ARTIFACT_URL``) every job names each local source by its URL there, whoever runs
it, so the job message is the same for every worker of its queue. Without one, no path of
this host may reach a worker elsewhere: such agents are not chosen, and when no agent on this
host can run the job it is refused, naming the file and what to set. A labels file is never
served (nothing pins its bytes), so it keeps a job on this host either way.

Pure: the manifests, the candidates and the two settings in, the job's view out.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.scheduler.agents import AgentEntry
from shared.artifacts import host_paths, served_manifest
from shared.manifests import DatasetManifest, ModelManifest

__all__ = ["Shipment", "ship"]


@dataclass(frozen=True)
class Shipment:
    """The manifests as the job carries them, and the agents that can run it."""

    manifest: ModelManifest
    dataset: DatasetManifest | None
    candidates: list[AgentEntry]


def ship(
    manifest: ModelManifest,
    dataset: DatasetManifest | None,
    candidates: list[AgentEntry],
    *,
    artifact_url: str | None,
    here: str,
) -> Shipment | str:
    """The job's view of its files for ``candidates``, or why none of them can have it."""
    paths = host_paths(manifest, dataset, served=artifact_url is not None)
    reachable = [a for a in candidates if a.host == here] if paths else list(candidates)
    if not reachable:
        return _refusal(paths, candidates, here=here, served=artifact_url is not None)
    if artifact_url is not None:
        manifest = served_manifest(manifest, artifact_url)
        dataset = None if dataset is None else served_manifest(dataset, artifact_url)
    return Shipment(manifest, dataset, reachable)


def _refusal(
    paths: list[tuple[str, str]], candidates: list[AgentEntry], *, here: str, served: bool
) -> str:
    named = "; ".join(f"{where} is {path}" for where, path in paths)
    hosts = ", ".join(sorted({f"{a.agent_id} on host {a.host}" for a in candidates}))
    fixes = []
    if any(not where.endswith("labels") for where, _ in paths):
        fixes.append(
            "set DLSCOPE_ARTIFACT_URL (the registry's artifact server, as the workers reach "
            "it) so that workers fetch the model's files by URL"
        )
    if any(where.endswith("labels") for where, _ in paths):
        fixes.append("list the labels in the manifest rather than naming a file")
    unserved = "" if served else " and no artifact server is configured"
    return (
        f"{named}: a file on the control plane's host {here}{unserved}; no worker that could "
        f"run the job can read it ({hosts}): {'; '.join(fixes)}"
    )
