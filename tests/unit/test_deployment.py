"""docker-compose.yml and the Dockerfile agree with the code: every service is deployed with
a command the CLI accepts, and every setting they pass is one dlscope reads."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from dlscope.cli import SERVICES, app
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


def test_the_gateway_listens_on_the_port_compose_publishes() -> None:
    command = DLSCOPE["gateway"]["command"]
    port = command[command.index("--port") + 1]
    assert f"{port}:{port}" in DLSCOPE["gateway"]["ports"]


def test_the_image_contains_everything_the_services_load_at_run_time() -> None:
    dockerfile = (REPOSITORY_ROOT / "deploy" / "Dockerfile").read_text()
    for path in ("shared", "services", "dlscope", "manifests", "migrations", "alembic.ini"):
        assert f"COPY {path}" in dockerfile or f" {path} " in dockerfile, path
