"""Jobs name the model's files so that the worker running them can read them: by URL of the
registry's artifact server when one is configured, as paths only to workers on the control
plane's own host, and never a path of that host to a worker elsewhere."""

from __future__ import annotations

from typing import Any

import pytest

from services.scheduler.agents import AgentEntry
from services.scheduler.artifacts import Shipment, ship
from shared.artifacts import host_paths, is_host_path, served_manifest, served_uri
from shared.config import Settings
from shared.manifests import DatasetManifest, ModelManifest

DIGEST = "a" * 64
WEIGHTS = "b" * 64
BASE = "http://10.200.0.1:8081/"


def model(source: str, *, weights: str | None = None, labels: Any = None) -> ModelManifest:
    steps = [{"op": "topk", "k": 1, **({"labels": labels} if labels is not None else {})}]
    return ModelManifest.model_validate(
        {
            "name": "net",
            "version": "1.0.0",
            "framework": {"name": "onnxruntime", "version": "*"},
            "inputs": [{"name": "x", "element_type": "float32", "shape": [1, 4]}],
            "outputs": [{"name": "y", "element_type": "float32", "shape": [1, 4], "steps": steps}],
            "source": {"uri": source, "sha256": DIGEST},
            **({"weights": {"uri": weights, "sha256": WEIGHTS}} if weights else {}),
        }
    )


def dataset(uri: str) -> DatasetManifest:
    return DatasetManifest.model_validate(
        {
            "name": "set",
            "version": "1.0.0",
            "source": {"uri": uri, "sha256": WEIGHTS, "archive": "tar.gz", "member": "data"},
            "samples": 4,
            "element": {"shape": [4], "element_type": "float32"},
        }
    )


def agent(agent_id: str, host: str) -> AgentEntry:
    return AgentEntry(
        agent_id=agent_id,
        host=host,
        framework="onnxruntime",
        framework_version="1.31.1",
        hardware="cpu",
        heartbeat_interval_s=1.0,
        last_seen=0.0,
    )


HERE = agent("a-here", "control")
THERE = agent("a-there", "h2")


@pytest.mark.parametrize(
    ("uri", "name"),
    [
        ("/srv/models/net.onnx", "net.onnx"),
        ("file:///srv/models/my%20net.onnx", "my%20net.onnx"),
        ("pkg://onnx/backend/test/data/light/light_squeezenet.onnx", "light_squeezenet.onnx"),
        ("/srv/models/weights.tar.gz", "weights.tar.gz"),
    ],
)
def test_a_local_source_is_served_by_its_digest_under_the_artifact_url(uri: str, name: str) -> None:
    assert served_uri(BASE, DIGEST, uri) == f"http://10.200.0.1:8081/sha256/{DIGEST}/{name}"


def test_served_manifest_names_every_local_file_by_url_and_leaves_downloads_alone() -> None:
    served = served_manifest(
        model("pkg://onnx/net.onnx", weights="https://models.example/w.bin"), BASE
    )
    assert served.source.uri == f"http://10.200.0.1:8081/sha256/{DIGEST}/net.onnx"
    assert served.source.sha256 == DIGEST
    assert served.weights is not None
    assert served.weights.uri == "https://models.example/w.bin"

    packed = served_manifest(dataset("/data/set.tar.gz"), BASE)
    assert packed.source.uri == f"http://10.200.0.1:8081/sha256/{WEIGHTS}/set.tar.gz"
    # The archive is fetched whole, and unpacked on the worker as the manifest says.
    assert (packed.source.archive, packed.source.member) == ("tar.gz", "data")


def test_paths_of_the_control_plane_host_are_named() -> None:
    assert is_host_path("/srv/net.onnx")
    assert is_host_path("file:///srv/net.onnx")
    assert not is_host_path("pkg://onnx/net.onnx")
    assert not is_host_path("http://h/net.onnx")
    manifest = model("file:///srv/net.onnx", labels="/srv/labels.txt")
    assert host_paths(manifest, None, served=False) == [
        ("model net@1.0.0 graph", "file:///srv/net.onnx"),
        ("model net@1.0.0 outputs[0].steps[0].labels", "/srv/labels.txt"),
    ]
    # Served, the source reaches anyone; a labels file pins no bytes to serve.
    assert host_paths(manifest, None, served=True) == [
        ("model net@1.0.0 outputs[0].steps[0].labels", "/srv/labels.txt")
    ]


def test_with_an_artifact_server_every_worker_gets_urls_and_no_path() -> None:
    shipment = ship(model("/srv/net.onnx"), None, [HERE, THERE], artifact_url=BASE, here="control")
    assert isinstance(shipment, Shipment)
    assert shipment.candidates == [HERE, THERE]
    assert shipment.manifest.source.uri.startswith("http://10.200.0.1:8081/sha256/")
    assert "/srv/" not in shipment.manifest.model_dump_json()


def test_without_one_a_path_reaches_only_workers_on_the_control_plane_host() -> None:
    shipment = ship(model("/srv/net.onnx"), None, [HERE, THERE], artifact_url=None, here="control")
    assert isinstance(shipment, Shipment)
    assert shipment.candidates == [HERE]
    assert shipment.manifest.source.uri == "/srv/net.onnx"


def test_a_path_no_chosen_worker_can_read_is_refused_saying_what_to_set() -> None:
    refusal = ship(model("/srv/net.onnx"), None, [THERE], artifact_url=None, here="control")
    assert isinstance(refusal, str)
    assert "model net@1.0.0 graph is /srv/net.onnx" in refusal
    assert "control plane's host control" in refusal
    assert "a-there on host h2" in refusal
    assert "DLSCOPE_ARTIFACT_URL" in refusal


def test_a_labels_file_keeps_the_job_on_the_control_plane_host_even_when_served() -> None:
    manifest = model("/srv/net.onnx", labels="/srv/labels.txt")
    refusal = ship(manifest, None, [THERE], artifact_url=BASE, here="control")
    assert isinstance(refusal, str)
    assert "/srv/labels.txt" in refusal
    assert "list the labels in the manifest" in refusal
    assert "DLSCOPE_ARTIFACT_URL" not in refusal


def test_packaged_and_downloaded_models_go_anywhere_as_they_are() -> None:
    for uri in ("pkg://onnx/net.onnx", "https://models.example/net.onnx"):
        shipment = ship(model(uri), None, [HERE, THERE], artifact_url=None, here="control")
        assert isinstance(shipment, Shipment)
        assert shipment.candidates == [HERE, THERE]
        assert shipment.manifest.source.uri == uri


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("DLSCOPE_ARTIFACT_URL", "ftp://10.0.0.1/", "must be an http:// or https:// URL"),
        ("DLSCOPE_ARTIFACT_URL", "http:///no-host", "with a host"),
        ("DLSCOPE_ARTIFACT_URL", "http://h:1/?x=1", "takes no query"),
        ("DLSCOPE_ARTIFACT_LISTEN", "0.0.0.0", "must be host:port"),
    ],
)
def test_a_bad_artifact_setting_is_refused_naming_it(
    variable: str, value: str, named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=named) as refused:
        Settings()
    assert variable in str(refused.value)


def test_a_text_models_tokenizer_travels_like_its_graph() -> None:
    manifest = ModelManifest.model_validate(
        {
            **model("/srv/encoder.onnx").model_dump(),
            "tokenizer": {"uri": "/srv/tokenizer.json", "sha256": WEIGHTS},
        }
    )
    assert host_paths(manifest, None, served=False) == [
        ("model net@1.0.0 graph", "/srv/encoder.onnx"),
        ("model net@1.0.0 tokenizer", "/srv/tokenizer.json"),
    ]
    served = served_manifest(manifest, BASE)
    assert served.tokenizer is not None
    assert served.tokenizer.uri == f"http://10.200.0.1:8081/sha256/{WEIGHTS}/tokenizer.json"
    assert host_paths(served, None, served=True) == []
