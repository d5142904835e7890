"""A RabbitMQ that refuses dlscope, said in one line with the fix and never the password: a
vhost that does not exist, a wrong password, nothing listening; and ``dlscope publish``
saying how to follow what it published (issue 44)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from yarl import URL

from harness.deployment import purge_namespace
from shared.config import REPOSITORY_ROOT
from shared.errors import BrokerUnavailable, ConfigurationError
from shared.messaging.amqp import AmqpBroker

pytestmark = pytest.mark.rabbitmq

PASSWORD = "guest"  # the test broker's; never in what dlscope says


def _with(url: str, *, vhost: str | None = None, password: str | None = None) -> str:
    parsed = URL(url)
    if vhost is not None:
        parsed = parsed.with_path(f"/{vhost}")
    if password is not None:
        parsed = parsed.with_password(password)
    return str(parsed)


def dlscope(home: Path, *arguments: str, **variables: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DLSCOPE_")}
    environment.update(DLSCOPE_HOME=str(home), COLUMNS="300", **variables)
    return subprocess.run(
        [sys.executable, "-m", "dlscope", *arguments],
        env=environment,
        cwd=REPOSITORY_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_a_vhost_that_does_not_exist_is_refused_naming_it_and_the_fix(
    rabbitmq_url: str,
) -> None:
    broker = AmqpBroker(_with(rabbitmq_url, vhost="nope"), timeout=5)
    with pytest.raises(ConfigurationError) as refused:
        await broker.connect()
    said = str(refused.value)
    assert re.match(r"RabbitMQ at [\w.]+:\d+ refused vhost 'nope' \(NOT_ALLOWED", said), said
    assert "rabbitmqctl add_vhost nope" in said
    assert f":{PASSWORD}@" not in said
    assert not broker.is_connected


async def test_a_wrong_password_is_refused_naming_the_user_not_the_password(
    rabbitmq_url: str,
) -> None:
    broker = AmqpBroker(_with(rabbitmq_url, password="not-the-password"), timeout=5)
    with pytest.raises(ConfigurationError) as refused:
        await broker.connect()
    said = str(refused.value)
    assert "refused user 'guest' (ACCESS_REFUSED): check the user and password" in said
    assert "not-the-password" not in said


async def test_nothing_listening_is_said_with_the_fix() -> None:
    broker = AmqpBroker("amqp://guest:s3cret@127.0.0.1:1/", timeout=5)
    with pytest.raises(BrokerUnavailable) as unavailable:
        await broker.connect()
    said = str(unavailable.value)
    assert said.startswith("cannot connect to RabbitMQ at 127.0.0.1:1 (connection refused)")
    assert "s3cret" not in said


def test_serve_against_a_vhost_that_does_not_exist_says_one_line(
    rabbitmq_url: str, tmp_path: Path
) -> None:
    served = dlscope(
        tmp_path, "serve", "registry", DLSCOPE_BROKER_URL=_with(rabbitmq_url, vhost="nope")
    )
    assert served.returncode == 1
    assert "Traceback" not in served.stderr
    [said] = served.stderr.splitlines()
    assert "registry cannot start: RabbitMQ at " in said
    assert "refused vhost 'nope'" in said
    assert "rabbitmqctl add_vhost nope" in said
    assert f":{PASSWORD}@" not in said


async def test_publish_says_how_to_follow_what_it_published(
    rabbitmq_url: str, namespace: str, tmp_path: Path
) -> None:
    try:
        published = dlscope(
            tmp_path,
            "publish",
            "squeezenet",
            "--gateway",
            "http://127.0.0.1:8080",
            DLSCOPE_BROKER_URL=rabbitmq_url,
            DLSCOPE_NAMESPACE=namespace,
        )
    finally:
        await purge_namespace(rabbitmq_url, namespace)
    assert published.returncode == 0, published.stderr
    first, hint = published.stdout.splitlines()
    evaluation = first.removeprefix("published evaluation ")
    assert hint.startswith(f"follow it at http://127.0.0.1:8080/evaluations/{evaluation} ")
    assert hint.endswith(f"dlscope report {evaluation} --gateway http://127.0.0.1:8080")
