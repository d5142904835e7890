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


def test_an_agent_that_missed_its_heartbeats_is_declared_offline_once() -> None:
    agents = directory()
    agents.observe(AgentHeartbeat(agent_id="ort-new", busy=False), now=14)
    # At 16 the others have been silent for more than 3 x 5 s
    assert ids(agents.lapsed(now=16)) == ["ort-gpu", "ort-old"]
    for agent in agents.lapsed(now=16):
        agents.observe(AgentOffline(agent_id=agent.agent_id, reason="missed 3 heartbeats"), 16)
    # Declared: not lapsed again, and no candidate
    assert agents.lapsed(now=20) == []
    assert ids(agents.online(now=20)) == ["ort-new"]


def test_an_agent_declared_offline_is_online_again_when_it_heartbeats() -> None:
    agents = directory()
    agents.observe(AgentOffline(agent_id="ort-old", reason="missed 3 heartbeats"), now=16)
    agents.observe(AgentHeartbeat(agent_id="ort-old", busy=True), now=17)
    assert "ort-old" in ids(agents.online(now=17))
    assert ids(agents.candidates(request(framework_version="<1.20"), now=17)) == ["ort-old"]


def test_the_model_s_framework_constraint_rules_agents_out_and_is_explained() -> None:
    agents = directory()
    assert ids(agents.candidates(request(), now=1, model_needs=">=1.30")) == ["ort-new"]
    reason = agents.explain_no_match(request(), now=1, model_needs=">=2")
    assert reason.startswith(
        "no online worker offers onnxruntime * on cpu (the model needs onnxruntime >=2); "
    )


def test_a_job_goes_to_the_shared_queue_only_when_every_agent_on_it_can_run_it() -> None:
    agents = directory()
    everyone = agents.candidates(request(), now=1)
    assert agents.route(request(), everyone, now=1) is None
    # ort-old (1.17) also consumes job.onnxruntime.cpu: the job is pinned to ort-new
    newer = agents.candidates(request(framework_version=">=1.30"), now=1)
    assert agents.route(request(framework_version=">=1.30"), newer, now=1) == "ort-new"
    # A pin in the request is kept
    pinned = request(agent_id="ort-old")
    assert agents.route(pinned, agents.candidates(pinned, now=1), now=1) == "ort-old"


def test_an_agent_without_its_framework_takes_nothing_and_is_named_in_the_reason() -> None:
    agents = AgentDirectory(missed_heartbeats=3)
    why = "framework 'tensorflow' is not installed here: pip install 'dlscope[tensorflow]'"
    broken = online("tf-1", framework="tensorflow", version="none")
    agents.observe(broken.model_copy(update={"capabilities": {"unavailable": why}}), now=0)
    agents.observe(online("tf-2", framework="tensorflow", version="2.21.0"), now=0)
    wanted = request(framework="tensorflow")

    assert ids(agents.candidates(wanted, now=1)) == ["tf-2"]
    # Every available agent of the kind is a candidate: the shared queue, which the broken
    # agent does not read, is used.
    assert agents.route(wanted, agents.candidates(wanted, now=1), now=1) is None
    pinned = request(framework="tensorflow", agent_id="tf-1")
    assert agents.candidates(pinned, now=1) == []
    assert why in agents.explain_no_match(pinned, now=1)
