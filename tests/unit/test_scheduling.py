"""The scheduler's agent directory: who is online and who can take a request."""

from __future__ import annotations

import uuid

from services.scheduler import AgentDirectory
from shared.messages import AgentHeartbeat, AgentOffline, AgentOnline, EvaluationRequested


def online(
    agent_id: str, framework: str = "onnxruntime", version: str = "1.31.1", hardware: str = "cpu"
) -> AgentOnline:
    return AgentOnline.model_validate(
        {
            "agent_id": agent_id,
            "host": "h",
            "framework": framework,
            "framework_version": version,
            "hardware": hardware,
            "heartbeat_interval_s": 5.0,
        }
    )


def request(**overrides: object) -> EvaluationRequested:
    return EvaluationRequested.model_validate(
        {"evaluation_id": uuid.uuid4(), "model": "m", "framework": "onnxruntime", **overrides}
    )


def directory() -> AgentDirectory:
    agents = AgentDirectory(missed_heartbeats=3)
    agents.observe(online("ort-old", version="1.17.0"), now=0)
    agents.observe(online("ort-new"), now=0)
    agents.observe(online("ort-gpu", hardware="gpu"), now=0)
    return agents


def ids(agents: list) -> list[str]:  # type: ignore[type-arg]
    return [a.agent_id for a in agents]


def test_candidates_match_framework_hardware_and_version() -> None:
    agents = directory()
    assert ids(agents.candidates(request(), now=1)) == ["ort-new", "ort-old"]
    assert ids(agents.candidates(request(framework_version=">=1.30"), now=1)) == ["ort-new"]
    assert ids(agents.candidates(request(hardware="gpu"), now=1)) == ["ort-gpu"]
    assert ids(agents.candidates(request(agent_id="ort-old"), now=1)) == ["ort-old"]


def test_an_agent_silent_for_three_heartbeats_is_no_candidate() -> None:
    agents = directory()
    agents.observe(AgentHeartbeat(agent_id="ort-new", busy=False), now=14)
    assert ids(agents.candidates(request(), now=16)) == ["ort-new"]


def test_an_agent_that_went_offline_is_no_candidate() -> None:
    agents = directory()
    agents.observe(AgentOffline(agent_id="ort-new", reason="stopped"), now=1)
    assert ids(agents.candidates(request(), now=1)) == ["ort-old"]


def test_no_match_explains_what_is_available() -> None:
    reason = directory().explain_no_match(request(framework="pytorch"), now=1)
    assert reason.startswith("no online worker offers pytorch * on cpu; available: ort-gpu")
    assert "ort-new (onnxruntime 1.31.1 on cpu)" in reason
    assert (
        AgentDirectory(missed_heartbeats=3)
        .explain_no_match(request(), now=0)
        .endswith("no agents are online")
    )
