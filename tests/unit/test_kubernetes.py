"""deploy/kubernetes renders, validates against the Kubernetes API's schemas, and agrees with
the code: every service is deployed with a command the CLI accepts, every setting it passes
is one dlscope reads, credentials go only where they are used, the containers run as the
images' user with DLSCOPE_HOME writable, and GPU workers ask for GPUs.

No cluster is needed: the overlays are rendered in Python (tests/kustomize.py) and, where
kubectl is installed, also by `kubectl kustomize`, and the two must agree.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import kubernetes_validate  # type: ignore[import-untyped]  # no stubs, no py.typed
import pytest
import yaml
from typer.testing import CliRunner

from dlscope.catalogue import SERVICES
from dlscope.cli import app
from services.gateway import create_app
from shared.config import REPOSITORY_ROOT, Settings
from shared.messages import FRAMEWORKS, HARDWARE
from tests.kustomize import Resource, key_of, render
from tests.unit.test_deployment import STAGES, env_of

KUBERNETES = REPOSITORY_ROOT / "deploy" / "kubernetes"
OVERLAYS = sorted(p.name for p in (KUBERNETES / "overlays").iterdir() if p.is_dir())
RENDERED = {overlay: render(KUBERNETES / "overlays" / overlay) for overlay in OVERLAYS}
# The oldest Kubernetes release still commonly offered by managed clusters, and the newest the
# pinned kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
WORKLOADS = {"Deployment", "StatefulSet", "Job"}
DLSCOPE_HOME = env_of("base")["DLSCOPE_HOME"]
IMAGE_USER = 10001


def everything() -> list[tuple[str, Resource]]:
    return [(overlay, r) for overlay, resources in RENDERED.items() for r in resources]


def pod_spec(resource: Resource) -> dict[str, Any]:
    spec: dict[str, Any] = resource["spec"]["template"]["spec"]
    return spec


def dlscope_containers(resources: list[Resource]) -> list[tuple[Resource, dict[str, Any]]]:
    """(workload, container) for every container running a dlscope image."""
    return [
        (r, c)
        for r in resources
        if r["kind"] in WORKLOADS
        for c in pod_spec(r)["containers"]
        if c["image"].split(":")[0].split("/")[-1].startswith("dlscope")
    ]


def named(resources: list[Resource], kind: str, name: str) -> Resource:
    [found] = [r for r in resources if r["kind"] == kind and r["metadata"]["name"] == name]
    return found


def test_the_overlays_are_the_documented_ones() -> None:
    assert OVERLAYS == ["all-in-one", "existing-infrastructure", "gpu"]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_resource_validates_against_the_kubernetes_schemas(
    overlay: str, version: str
) -> None:
    for resource in RENDERED[overlay]:
        # strict: a misspelt or misplaced field is an error, not silently dropped.
        kubernetes_validate.validate(resource, version, strict=True)


def test_the_schema_check_refuses_a_misplaced_field() -> None:
    gateway = copy.deepcopy(named(RENDERED["all-in-one"], "Deployment", "gateway"))
    pod_spec(gateway)["containers"][0]["readinesProbe"] = {"httpGet": {"path": "/readyz"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(gateway, KUBERNETES_VERSIONS[-1], strict=True)


@pytest.mark.skipif(
    shutil.which("kubectl") is None,
    reason="no kubectl here: the overlays are rendered by tests/kustomize.py alone",
)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_kubectl_kustomize_renders_the_same_resources(overlay: str) -> None:
    result = subprocess.run(
        ["kubectl", "kustomize", str(KUBERNETES / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    theirs = {key_of(r): r for r in yaml.safe_load_all(result.stdout) if r}
    assert theirs == {key_of(r): r for r in RENDERED[overlay]}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_everything_is_in_the_dlscope_namespace(overlay: str) -> None:
    for resource in RENDERED[overlay]:
        if resource["kind"] == "Namespace":
            assert resource["metadata"]["name"] == "dlscope"
        else:
            assert resource["metadata"]["namespace"] == "dlscope", key_of(resource)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_service_is_deployed_and_the_migrations_run_as_a_job(overlay: str) -> None:
    resources = RENDERED[overlay]
    served = {c["args"][1] for _, c in dlscope_containers(resources) if c["args"][0] == "serve"}
    assert served == set(SERVICES)
    migrate = named(resources, "Job", "dlscope-migrate")
    assert pod_spec(migrate)["containers"][0]["args"] == ["db", "upgrade"]


def commands() -> list[tuple[str, list[str]]]:
    return [
        (f"{overlay}/{w['metadata']['name']}", c["args"])
        for overlay, resources in RENDERED.items()
        for w, c in dlscope_containers(resources)
    ]


@pytest.mark.parametrize(("where", "command"), commands(), ids=[w for w, _ in commands()])
def test_every_command_is_one_the_cli_accepts(where: str, command: list[str]) -> None:
    # --help after the real arguments: the CLI parses them all, then prints help.
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output


def environment(resources: list[Resource], container: dict[str, Any]) -> dict[str, str]:
    """Every variable ``container`` gets: its env, and the keys of what it takes envFrom."""
    variables = {e["name"]: e.get("value", "") for e in container.get("env", [])}
    for source in container.get("envFrom", []):
        [(kind, ref)] = [(k, v) for k, v in source.items() if k.endswith("Ref")]
        found = named(
            resources, {"configMapRef": "ConfigMap", "secretRef": "Secret"}[kind], ref["name"]
        )
        variables.update(found.get("data") or found.get("stringData") or {})
    return variables


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_environment_variable_is_a_setting(overlay: str) -> None:
    settings = set(Settings.model_fields)
    resources = RENDERED[overlay]
    for workload, container in dlscope_containers(resources):
        for variable in environment(resources, container):
            assert variable.startswith("DLSCOPE_"), (workload["metadata"]["name"], variable)
            assert variable.removeprefix("DLSCOPE_").lower() in settings, variable
        # And a valid value: the settings the container starts with validate.
        Settings.model_validate(
            {
                name.removeprefix("DLSCOPE_").lower(): value
                for name, value in environment(resources, container).items()
            }
        )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_workers_get_the_broker_and_never_the_database_or_the_token(overlay: str) -> None:
    resources = RENDERED[overlay]
    for workload, container in dlscope_containers(resources):
        variables = set(environment(resources, container))
        role = workload["metadata"]["name"]
        assert ("DLSCOPE_BROKER_URL" in variables) == (role != "dlscope-migrate"), role
        if role.startswith("worker-"):
            assert "DLSCOPE_DATABASE_URL" not in variables, role
        if role != "gateway":
            assert "DLSCOPE_API_TOKEN" not in variables, role
        # The artifact server's own token: the registry guards its files with it, and the
        # workers (which only fetch them) send it.
        fetches = role == "registry" or role.startswith("worker-")
        assert ("DLSCOPE_ARTIFACT_TOKEN" in variables) == fetches, role
    gateway = pod_spec(named(resources, "Deployment", "gateway"))["containers"][0]
    assert {"DLSCOPE_DATABASE_URL", "DLSCOPE_API_TOKEN"} <= set(environment(resources, gateway))


def test_in_cluster_credentials_match_the_urls_dlscope_is_given() -> None:
    resources = RENDERED["all-in-one"]
    broker = named(resources, "Secret", "dlscope-broker")["stringData"]["DLSCOPE_BROKER_URL"]
    database = named(resources, "Secret", "dlscope-database")["stringData"]["DLSCOPE_DATABASE_URL"]
    rabbitmq = named(resources, "Secret", "rabbitmq-credentials")["stringData"]
    postgres = named(resources, "Secret", "postgres-credentials")["stringData"]
    assert broker.startswith(
        f"amqp://{rabbitmq['RABBITMQ_DEFAULT_USER']}:{rabbitmq['RABBITMQ_DEFAULT_PASS']}@rabbitmq:5672/"
    )
    assert database == (
        f"postgresql+asyncpg://{postgres['POSTGRES_USER']}:{postgres['POSTGRES_PASSWORD']}"
        f"@postgres:5432/{postgres['POSTGRES_DB']}"
    )
    config = named(resources, "ConfigMap", "dlscope-config")["data"]
    assert config["DLSCOPE_OTLP_ENDPOINT"] == "http://jaeger:4318"
    jaeger = pod_spec(named(resources, "Deployment", "jaeger"))["containers"][0]
    assert {"name": "COLLECTOR_OTLP_ENABLED", "value": "true"} in jaeger["env"]
    # The RabbitMQ plugins are the ones docker-compose enables.
    plugins = named(resources, "ConfigMap", "rabbitmq-plugins")["data"]["enabled_plugins"]
    assert plugins == (REPOSITORY_ROOT / "deploy" / "rabbitmq" / "enabled_plugins").read_text()


def test_services_reach_the_infrastructure_by_its_service_names() -> None:
    resources = RENDERED["all-in-one"]
    ports = {
        r["metadata"]["name"]: {p["port"] for p in r["spec"]["ports"]}
        for r in resources
        if r["kind"] == "Service"
    }
    assert 5672 in ports["rabbitmq"]
    assert 5432 in ports["postgres"]
    assert {4318, 16686} <= ports["jaeger"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_dlscope_runs_as_the_images_user_with_a_writable_home(overlay: str) -> None:
    for workload, container in dlscope_containers(RENDERED[overlay]):
        pod = pod_spec(workload)
        context = pod["securityContext"]
        assert context["runAsNonRoot"] is True
        assert context["runAsUser"] == context["fsGroup"] == IMAGE_USER
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        # The root filesystem is read-only; DLSCOPE_HOME (the artifact cache) is a volume
        # the pod's group owns, and /tmp too.
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        for path in (DLSCOPE_HOME, "/tmp"):
            assert "emptyDir" in volumes[mounts[path]], (workload["metadata"]["name"], path)


def test_the_images_user_is_the_one_the_manifests_run_as() -> None:
    [useradd] = [run for _, run in STAGES["base"] if "useradd" in run]
    assert f"--uid {IMAGE_USER}" in useradd
    assert f"--gid {IMAGE_USER}" in useradd


def workers(resources: list[Resource]) -> list[tuple[Resource, dict[str, Any], str, str]]:
    found = []
    for workload, container in dlscope_containers(resources):
        args = container["args"]
        if args[:2] == ["serve", "worker"]:
            framework = args[args.index("--framework") + 1]
            hardware = args[args.index("--hardware") + 1]
            found.append((workload, container, framework, hardware))
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_worker_runs_its_frameworks_image_on_fitting_nodes(overlay: str) -> None:
    for workload, container, framework, hardware in workers(RENDERED[overlay]):
        name = workload["metadata"]["name"]
        assert framework in FRAMEWORKS
        assert hardware in HARDWARE
        assert name == f"worker-{framework}-{hardware}"
        assert container["image"] == f"dlscope-worker-{framework}:latest"
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert labels["dlscope.io/framework"] == framework
        assert labels["dlscope.io/hardware"] == hardware
        pod = pod_spec(workload)
        assert pod["nodeSelector"]["kubernetes.io/arch"] == "amd64"
        resources = container["resources"]
        # Whole, dedicated cores: requests equal limits (Guaranteed QoS), so that a
        # measurement does not share its cores.
        assert resources["requests"]["cpu"] == resources["limits"]["cpu"], name
        assert resources["requests"]["memory"] == resources["limits"]["memory"], name
        assert "podAntiAffinity" in pod["affinity"], name
        if hardware == "gpu":
            assert resources["limits"]["nvidia.com/gpu"] >= 1, name
            assert pod["nodeSelector"]["nvidia.com/gpu.present"] == "true"
            assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
                "tolerations"
            ]
        else:
            assert "nvidia.com/gpu" not in resources["limits"], name


def test_the_gpu_overlay_adds_a_tensorrt_worker_and_the_others_none() -> None:
    for overlay, resources in RENDERED.items():
        kinds = {(f, h) for _, _, f, h in workers(resources)}
        assert {("onnxruntime", "cpu"), ("pytorch", "cpu"), ("tensorflow", "cpu")} <= kinds
        assert ("opencl", "cpu") in kinds
        assert (("tensorrt", "gpu") in kinds) == (overlay == "gpu"), overlay


WORKER_TEMPLATE = KUBERNETES / "base" / "workers" / "template"
# Every worker kind: a kustomization of the template.
WORKER_KINDS = [
    *sorted(p for p in WORKER_TEMPLATE.parent.iterdir() if p.is_dir() and p != WORKER_TEMPLATE),
    KUBERNETES / "components" / "tensorrt-gpu" / "worker",
]
# What a worker's patch may set beside its name: its labels, image, args and resources, and on
# a GPU what a GPU node needs. Everything else (its anti-affinity to every other worker
# included) is the template's.
_POD = ("spec", "template", "spec")
_WORKER = (*_POD, "containers", "worker")
PATCHED: dict[str, set[tuple[str, ...]]] = {
    "cpu": {
        ("metadata", "name"),
        *(
            (*where, label)
            for where in (
                ("metadata", "labels"),
                ("spec", "selector", "matchLabels"),
                ("spec", "template", "metadata", "labels"),
            )
            for label in ("dlscope.io/framework", "dlscope.io/hardware")
        ),
        (*_WORKER, "image"),
        (*_WORKER, "args"),
        (*_WORKER, "resources"),
    },
}
PATCHED["gpu"] = PATCHED["cpu"] | {
    (*_POD, "nodeSelector", "nvidia.com/gpu.present"),
    (*_POD, "tolerations"),
    (*_POD, "affinity", "podAntiAffinity"),
    (*_POD, "volumes", "home", "emptyDir", "sizeLimit"),
}


def differences(a: Any, b: Any, path: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The paths at which ``a`` and ``b`` differ; list items with a name are paired by it."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {
            d
            for key in a.keys() | b.keys()
            for d in differences(a.get(key), b.get(key), (*path, key))
        }
    items = [*a, *b] if isinstance(a, list) and isinstance(b, list) and a and b else []
    if items and all(isinstance(item, dict) and "name" in item for item in items):
        return differences(
            {item["name"]: item for item in a}, {item["name"]: item for item in b}, path
        )
    return set() if a == b else {path}


def test_the_worker_deployments_are_written_once() -> None:
    """One Deployment (base/workers/template); each worker kind names and patches it."""
    [template] = render(WORKER_TEMPLATE)
    names = set()
    for kind in WORKER_KINDS:
        kustomization = yaml.safe_load((kind / "kustomization.yaml").read_text())
        assert set(kustomization) <= {"apiVersion", "kind", "resources", "nameSuffix", "patches"}
        assert [(kind / r).resolve() for r in kustomization["resources"]] == [WORKER_TEMPLATE]
        names.add(template["metadata"]["name"] + kustomization["nameSuffix"])
    for overlay, resources in RENDERED.items():
        for worker, _, _, hardware in workers(resources):
            assert worker["metadata"]["name"] in names, overlay
            expected = copy.deepcopy(template)
            expected["metadata"]["namespace"] = worker["metadata"]["namespace"]
            for difference in differences(expected, worker):
                assert any(difference[: len(p)] == p for p in PATCHED[hardware]), (
                    overlay,
                    worker["metadata"]["name"],
                    difference,
                )
    assert {w["metadata"]["name"] for w, _, _, _ in workers(RENDERED["gpu"])} == names


def test_the_gateways_probes_are_its_health_endpoints() -> None:
    # The paths the gateway serves, as its OpenAPI document lists them.
    gateway = create_app(cast(Any, SimpleNamespace(settings=Settings(), tracer=None)))
    routes = set(gateway.openapi()["paths"])
    resources = RENDERED["all-in-one"]
    [container] = pod_spec(named(resources, "Deployment", "gateway"))["containers"]
    args = container["args"]
    [port] = container["ports"]
    assert port["containerPort"] == int(args[args.index("--port") + 1])
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert {"/readyz", "/healthz"} <= routes
    service = named(resources, "Service", "gateway")
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    assert service["spec"]["selector"].items() <= (
        named(resources, "Deployment", "gateway")["spec"]["template"]["metadata"]["labels"].items()
    )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_selector_selects_its_own_pods(overlay: str) -> None:
    for resource in RENDERED[overlay]:
        if resource["kind"] in {"Deployment", "StatefulSet"}:
            selector = resource["spec"]["selector"]["matchLabels"]
            labels = resource["spec"]["template"]["metadata"]["labels"]
            assert selector.items() <= labels.items(), key_of(resource)


def test_the_existing_infrastructure_overlay_brings_none_of_its_own() -> None:
    resources = RENDERED["existing-infrastructure"]
    names = {r["metadata"]["name"] for r in resources}
    assert not names & {"rabbitmq", "postgres", "jaeger"}
    broker = named(resources, "Secret", "dlscope-broker")["stringData"]["DLSCOPE_BROKER_URL"]
    assert "@rabbitmq:" not in broker


def test_the_kustomize_subset_refuses_what_it_does_not_render(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\ncommonLabels: {a: b}\n")
    with pytest.raises(ValueError, match="commonLabels"):
        render(tmp_path)


def test_the_kustomize_subset_patches_before_it_renames_and_renames_only_deployments(
    tmp_path: Path,
) -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"}}
    (tmp_path / "deployment.yaml").write_text(yaml.safe_dump(deployment))
    patch = yaml.safe_dump({**deployment, "spec": {"replicas": 2}})
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {"resources": ["deployment.yaml"], "nameSuffix": "-x", "patches": [{"patch": patch}]}
        )
    )
    assert render(tmp_path) == [
        {**deployment, "metadata": {"name": "w-x"}, "spec": {"replicas": 2}}
    ]
    (tmp_path / "configmap.yaml").write_text(yaml.safe_dump({**deployment, "kind": "ConfigMap"}))
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": ["configmap.yaml"], "nameSuffix": "-x"})
    )
    with pytest.raises(ValueError, match="nameSuffix on a ConfigMap"):
        render(tmp_path)
