"""docker-compose.yml and the Dockerfile agree with the code: every service is deployed with
a command the CLI accepts, every setting they pass is one dlscope reads, the control plane's
image holds no framework, each worker's image its own, and both run as a user who can write
DLSCOPE_HOME. (No Docker engine here: the files are read, and rendered by `docker compose`
where it exists.)"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tomllib
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from dlscope.catalogue import SERVICES
from dlscope.cli import app
from shared.config import REPOSITORY_ROOT, Settings
from shared.messages import FRAMEWORKS, HARDWARE

COMPOSE: dict[str, Any] = yaml.safe_load((REPOSITORY_ROOT / "docker-compose.yml").read_text())
INFRASTRUCTURE = {"rabbitmq", "postgres", "jaeger"}
DLSCOPE = {name: s for name, s in COMPOSE["services"].items() if name not in INFRASTRUCTURE}


def served(service: dict[str, Any]) -> str | None:
    command = service["command"]
    return command[1] if command[0] == "serve" else None


def test_every_service_is_deployed_exactly_as_the_cli_names_it() -> None:
    deployed = {served(s) for s in DLSCOPE.values()} - {None}
    assert deployed == set(SERVICES)


@pytest.mark.parametrize("name", sorted(DLSCOPE))
def test_every_command_is_one_the_cli_accepts(name: str) -> None:
    command = DLSCOPE[name]["command"]
    # --help after the real arguments: the CLI parses them all, then prints help.
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output


def test_workers_use_known_frameworks_and_hardware() -> None:
    for service in DLSCOPE.values():
        command = service["command"]
        if served(service) == "worker":
            assert command[command.index("--framework") + 1] in FRAMEWORKS
            assert command[command.index("--hardware") + 1] in HARDWARE


@pytest.mark.parametrize("name", sorted(DLSCOPE))
def test_every_environment_variable_is_a_setting(name: str) -> None:
    settings = set(Settings.model_fields)
    for variable in DLSCOPE[name]["environment"]:
        assert variable.startswith("DLSCOPE_")
        assert variable.removeprefix("DLSCOPE_").lower() in settings, variable


def test_the_services_reach_the_infrastructure_compose_starts() -> None:
    env = DLSCOPE["recorder"]["environment"]
    assert "@rabbitmq:5672" in env["DLSCOPE_BROKER_URL"]
    assert "@postgres:5432/" in env["DLSCOPE_DATABASE_URL"]
    assert env["DLSCOPE_OTLP_ENDPOINT"].startswith("http://jaeger:4318")
    assert COMPOSE["services"]["jaeger"]["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"


def test_what_listens_beyond_loopback_in_compose_takes_a_token_workers_never_the_api_one() -> None:
    for name, service in DLSCOPE.items():
        variables = service["environment"]
        assert ("DLSCOPE_API_TOKEN" in variables) == (name == "gateway"), name
        assert "DLSCOPE_ARTIFACT_TOKEN" in variables, name
    assert "0.0.0.0" in DLSCOPE["gateway"]["command"]


def test_the_gateway_listens_on_the_port_compose_publishes() -> None:
    command = DLSCOPE["gateway"]["command"]
    port = command[command.index("--port") + 1]
    assert f"{port}:{port}" in DLSCOPE["gateway"]["ports"]


def test_the_image_contains_everything_the_services_load_at_run_time() -> None:
    dockerfile = (REPOSITORY_ROOT / "deploy" / "Dockerfile").read_text()
    for path in ("shared", "services", "dlscope", "manifests", "migrations", "alembic.ini"):
        assert f"COPY {path}" in dockerfile or f" {path} " in dockerfile, path


# The images: deploy/Dockerfile's stages, read as (instruction, arguments) lines per stage.
DOCKERFILE = (REPOSITORY_ROOT / "deploy" / "Dockerfile").read_text()


def stages(text: str) -> dict[str, list[tuple[str, str]]]:
    lines: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if lines and lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1] + " " + line
        elif line and not line.startswith("#"):
            lines.append(line)
    found: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for line in lines:
        instruction, _, arguments = line.partition(" ")
        if instruction.upper() == "FROM":
            current = []
            found[arguments.split()[-1]] = current
        current.append((instruction.upper(), " ".join(arguments.split())))
    return found


STAGES = stages(DOCKERFILE)
EXTRAS: dict[str, list[str]] = tomllib.loads((REPOSITORY_ROOT / "pyproject.toml").read_text())[
    "project"
]["optional-dependencies"]


def instructions(stage: str, kind: str) -> list[str]:
    return [arguments for instruction, arguments in STAGES[stage] if instruction == kind]


def env_of(stage: str) -> dict[str, str]:
    pairs = shlex.split(" ".join(instructions(stage, "ENV")))
    return dict(pair.split("=", 1) for pair in pairs)


REQUIREMENTS = (
    "python deploy/requirements.py{} > /tmp/requirements.txt"
    " && pip install -r /tmp/requirements.txt && rm /tmp/requirements.txt"
)


def test_the_control_plane_image_installs_no_framework() -> None:
    # The base install's requirements (deploy/requirements.py without extras), then dlscope.
    assert instructions("control-plane", "RUN") == [
        REQUIREMENTS.format(""),
        "pip install --no-deps -e .",
    ]


def test_a_worker_image_installs_its_frameworks_extra() -> None:
    assert instructions("worker", "RUN") == [
        REQUIREMENTS.format(' "${FRAMEWORK},loadgen"'),
        'pip install --no-deps -e ".[${FRAMEWORK},loadgen]"',
    ]


@pytest.mark.parametrize("stage", ["control-plane", "worker"])
def test_the_dependencies_are_installed_before_the_source_is_copied(stage: str) -> None:
    # So that a change of code does not reinstall a framework: the layers up to the
    # dependencies depend on pyproject.toml and deploy/requirements.py only.
    lines = STAGES["base"] + STAGES[stage]
    copied = [arguments.split()[0] for instruction, arguments in lines if instruction == "COPY"]
    dependencies = next(
        i for i, (kind, arguments) in enumerate(lines) if kind == "RUN" and "-r /tmp" in arguments
    )
    before = [arguments.split()[0] for kind, arguments in lines[:dependencies] if kind == "COPY"]
    assert before == ["pyproject.toml", "deploy/requirements.py"]
    assert {"shared", "services", "dlscope", "manifests", "migrations"} <= set(copied)


@pytest.mark.parametrize("stage", ["control-plane", "worker"])
def test_the_images_run_as_a_user_who_owns_dlscope_home(stage: str) -> None:
    assert instructions(stage, "USER") == ["dlscope:dlscope"]
    home = env_of("base")["DLSCOPE_HOME"]
    [useradd] = [run for run in instructions("base", "RUN") if "useradd" in run]
    # The user is created with DLSCOPE_HOME as its home, so it owns the artifact cache
    # (before, the image made the folder as root and ran as nobody, who could not write it).
    assert f"--home-dir {home} --create-home" in useradd
    assert "--uid 10001" in useradd
    assert env_of("base")["HOME"] == home


def test_compose_runs_the_control_plane_and_one_worker_image_per_framework() -> None:
    for name, service in DLSCOPE.items():
        build = service["build"]
        assert build["dockerfile"] == "deploy/Dockerfile"
        if served(service) == "worker":
            command = service["command"]
            framework = command[command.index("--framework") + 1]
            assert build["target"] == "worker", name
            assert build["args"]["FRAMEWORK"] == framework, name
            assert framework in EXTRAS, framework
            assert service["image"] == f"dlscope-worker-{framework}:latest"
            # Its artifact cache outlives the container, in DLSCOPE_HOME; the device leases
            # are in a volume every worker of the host mounts, where DLSCOPE_LEASE_DIR says.
            cache, leases = service["volumes"]
            assert cache.endswith(":" + env_of("base")["DLSCOPE_HOME"])
            assert cache.split(":")[0] in COMPOSE["volumes"]
            assert leases == f"device-leases:{service['environment']['DLSCOPE_LEASE_DIR']}"
            assert "device-leases" in COMPOSE["volumes"]
        else:
            assert build["target"] == "control-plane", name
            assert service["image"] == "dlscope:latest"
    for stage in {s["build"]["target"] for s in DLSCOPE.values()}:
        assert stage in STAGES


def test_the_gateway_is_healthy_when_it_is_ready() -> None:
    gateway = DLSCOPE["gateway"]
    command = gateway["command"]
    port = command[command.index("--port") + 1]
    assert f"http://127.0.0.1:{port}/readyz" in " ".join(gateway["healthcheck"]["test"])


def compose_available() -> bool:
    docker = shutil.which("docker")
    return docker is not None and (
        subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    )


@pytest.mark.skipif(
    not compose_available(),
    reason="no `docker compose` here: the YAML checks above stand in for it",
)
def test_docker_compose_renders_the_file() -> None:
    result = subprocess.run(
        ["docker", "compose", "-f", "docker-compose.yml", "config", "--quiet"],
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
