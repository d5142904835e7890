"""Contract of the event store, the same on SQLite (embedded) and PostgreSQL (deployed).

Each test tells a story: given some events, when they are appended, then the log and the
projections (evaluations, agents) say what a user of dlscope expects to read.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from harness.payloads import latency, single_stream_run
from shared.errors import ConfigurationError, StoreUnavailable
from shared.eventstore import (
    AgentView,
    EvaluationView,
    EventStore,
    current_revision,
    head_revision,
    upgrade,
)
from shared.eventstore.quarantine import find_inadmissible, quarantine_inadmissible
from shared.messages import (
    AgentHeartbeat,
    AgentOffline,
    AgentOnline,
    AgentsDiscover,
    Envelope,
    EvaluationCompleted,
    EvaluationFailed,
    EvaluationMeasured,
    EvaluationRequested,
    EvaluationScheduled,
    EvaluationStarted,
    Payload,
    SweepPoint,
    agent_stream,
    evaluation_stream,
)
from shared.telemetry import trace_id_of

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def event(
    payload: Payload, *, stream_id: str, correlation_id: uuid.UUID, when: datetime
) -> Envelope:
    """An envelope as a service would publish it, at a chosen time."""
    wrapped = Envelope.wrap(payload, stream_id=stream_id, correlation_id=correlation_id)
    return wrapped.model_copy(update={"occurred_at": when})


@dataclass
class Evaluation:
    """The events one evaluation goes through, as the services would publish them."""

    evaluation_id: uuid.UUID = field(default_factory=uuid.uuid4)
    model: str = "resnet50"
    agent_id: str = "agent-1"

    @property
    def stream(self) -> str:
        return evaluation_stream(self.evaluation_id)

    def _event(self, payload: Payload, when: datetime) -> Envelope:
        return event(payload, stream_id=self.stream, correlation_id=self.evaluation_id, when=when)

    def requested(self, when: datetime) -> Envelope:
        return self._event(
            EvaluationRequested(
                evaluation_id=self.evaluation_id,
                model=self.model,
                model_version=">=1,<2",
                framework="onnxruntime",
            ),
            when,
        )

    def scheduled(self, when: datetime) -> Envelope:
        return self._event(
            EvaluationScheduled(
                evaluation_id=self.evaluation_id,
                model=self.model,
                model_version="1.3.0",
                framework="onnxruntime",
                hardware="cpu",
                agent_id=None,
                candidates=[self.agent_id],
            ),
            when,
        )

    def started(
        self,
        when: datetime,
        *,
        attempt: int = 1,
        agent_id: str | None = None,
        host: str = "bench-1",
    ) -> Envelope:
        return self._event(
            EvaluationStarted(
                evaluation_id=self.evaluation_id,
                agent_id=agent_id or self.agent_id,
                host=host,
                environment={"onnxruntime": "1.31.1", "host": host},
                attempt=attempt,
            ),
            when,
        )

    def measured(
        self, when: datetime, *, attempt: int = 1, agent_id: str | None = None
    ) -> Envelope:
        return self._event(
            EvaluationMeasured(
                evaluation_id=self.evaluation_id,
                agent_id=agent_id or self.agent_id,
                attempt=attempt,
                load_ns=120_000_000,
                run=single_stream_run(),
            ),
            when,
        )

    def completed(self, when: datetime, p50_ms: float = 4.2) -> Envelope:
        return self._event(
            EvaluationCompleted(evaluation_id=self.evaluation_id, result=latency(p50_ms)), when
        )

    def failed(self, when: datetime, reason: str = "CUDA out of memory") -> Envelope:
        return self._event(
            EvaluationFailed(evaluation_id=self.evaluation_id, stage="predictor", reason=reason),
            when,
        )

    def lifecycle(self, start: float) -> list[Envelope]:
        return [
            self.requested(at(start)),
            self.scheduled(at(start + 1)),
            self.started(at(start + 2)),
            self.measured(at(start + 3)),
            self.completed(at(start + 4)),
        ]


@dataclass
class Agent:
    agent_id: str = "agent-1"

    def _event(self, payload: Payload, when: datetime) -> Envelope:
        return event(
            payload,
            stream_id=agent_stream(self.agent_id),
            correlation_id=uuid.uuid4(),
            when=when,
        )

    def online(self, when: datetime) -> Envelope:
        return self._event(
            AgentOnline(
                agent_id=self.agent_id,
                host="bench-1",
                framework="onnxruntime",
                framework_version="1.31.1",
                hardware="cpu",
                capabilities={"providers": ["CPUExecutionProvider"]},
                heartbeat_interval_s=5.0,
            ),
            when,
        )

    def heartbeat(self, when: datetime, *, busy: bool) -> Envelope:
        return self._event(AgentHeartbeat(agent_id=self.agent_id, busy=busy), when)

    def offline(self, when: datetime) -> Envelope:
        return self._event(AgentOffline(agent_id=self.agent_id, reason="shutdown"), when)


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ]
)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    # A directory that does not exist yet: the store creates it.
    return f"sqlite+aiosqlite:///{tmp_path / 'home' / 'dlscope.db'}"


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[EventStore]:
    await upgrade(database_url)
    async with EventStore.from_url(database_url) as event_store:
        yield event_store


async def evaluation(store: EventStore, item: Evaluation) -> EvaluationView:
    view = await store.get_evaluation(item.evaluation_id)
    assert view is not None, f"no projection row for evaluation {item.evaluation_id}"
    return view


async def agent(store: EventStore, agent_id: str) -> AgentView:
    by_id = {view.agent_id: view for view in await store.list_agents()}
    assert agent_id in by_id, f"no projection row for agent {agent_id}"
    return by_id[agent_id]


# --- the log --------------------------------------------------------------------------------


async def test_an_evaluations_events_come_back_in_order_with_versions_1_to_n(
    store: EventStore,
) -> None:
    # Given an evaluation's lifecycle, appended in two batches
    item = Evaluation()
    published = item.lifecycle(start=0)

    # When appended
    assert await store.append(published[:2]) == [True, True]
    assert await store.append(published[2:]) == [True, True, True]

    # Then its stream holds them in order, numbered 1..n, with what was published
    stored = await store.stream_events(item.stream)
    assert [e.event_id for e in stored] == [e.event_id for e in published]
    assert [e.version for e in stored] == [1, 2, 3, 4, 5]
    assert [e.type for e in stored] == [
        "evaluation.requested",
        "evaluation.scheduled",
        "evaluation.started",
        "evaluation.measured",
        "evaluation.completed",
    ]
    assert stored[0].payload == published[0].payload
    assert stored[0].occurred_at == at(0)
    assert stored[0].correlation_id == item.evaluation_id
    assert [e.envelope() for e in stored] == published


async def test_global_positions_increase_across_streams_and_batches(store: EventStore) -> None:
    # Given two evaluations and an agent whose events interleave over three batches
    first, second, worker = Evaluation(), Evaluation(), Agent()
    batches = [
        [first.requested(at(0)), worker.online(at(0.5)), second.requested(at(1))],
        [first.scheduled(at(2)), second.scheduled(at(3))],
        [worker.heartbeat(at(4), busy=True)],
    ]

    # When appended
    for batch in batches:
        await store.append(batch)

    # Then read_all gives every event once, in append order, with increasing positions
    everything = await store.read_all()
    assert [e.event_id for e in everything] == [e.event_id for b in batches for e in b]
    positions = [e.position for e in everything]
    assert positions == sorted(set(positions))
    assert await store.count_events() == 6

    # and reading on from a position continues exactly after it
    page = await store.read_all(after=positions[1], limit=2)
    assert [e.position for e in page] == positions[2:4]
    assert await store.read_all(after=positions[-1]) == []
    # while each stream has its own versions
    assert [e.version for e in await store.stream_events(second.stream)] == [1, 2]


async def test_a_redelivered_event_is_a_no_op(store: EventStore) -> None:
    # Given an evaluation that is stored and completed
    item = Evaluation()
    published = item.lifecycle(start=0)
    await store.append(published)
    before = await evaluation(store, item)

    # When RabbitMQ delivers its request and completion again, beside one new event
    late = Evaluation()
    outcome = await store.append([published[0], late.requested(at(9)), published[-1]])

    # Then only the new event is stored, and the evaluation is unchanged
    assert outcome == [False, True, False]
    assert await store.count_events() == len(published) + 1
    assert [e.version for e in await store.stream_events(item.stream)] == [1, 2, 3, 4, 5]
    assert await evaluation(store, item) == before


async def test_a_duplicate_within_one_batch_is_stored_once(store: EventStore) -> None:
    # Given a batch in which the same message appears twice
    item = Evaluation()
    requested, scheduled = item.requested(at(0)), item.scheduled(at(1))

    # When appended
    outcome = await store.append([requested, scheduled, requested])

    # Then the first copy is stored and the second reported as already there
    assert outcome == [True, True, False]
    assert await store.count_events() == 2
    assert [e.version for e in await store.stream_events(item.stream)] == [1, 2]
    assert (await evaluation(store, item)).last_position == (await store.read_all())[-1].position


async def test_an_empty_batch_changes_nothing(store: EventStore) -> None:
    assert await store.append([]) == []
    assert await store.count_events() == 0


# --- the evaluations projection -------------------------------------------------------------


async def test_an_evaluation_is_followed_from_request_to_result(store: EventStore) -> None:
    item = Evaluation(model="bert-base", agent_id="agent-7")
    requested, scheduled, started, measured, completed = item.lifecycle(start=0)

    # Given a request: the evaluation is known, with the version constraint asked for
    await store.append([requested])
    view = await evaluation(store, item)
    assert view.status == "requested"
    assert (view.model, view.model_version, view.framework) == (
        "bert-base",
        ">=1,<2",
        "onnxruntime",
    )
    assert view.request == requested.payload
    assert view.requested_at == at(0)
    assert view.result is None

    # When scheduled: the resolved version replaces the constraint
    await store.append([scheduled])
    view = await evaluation(store, item)
    assert (view.status, view.model_version, view.hardware) == ("scheduled", "1.3.0", "cpu")

    # When started and measured: running, on the agent that took the job
    await store.append([started])
    view = await evaluation(store, item)
    assert (view.status, view.agent_id) == ("running", "agent-7")
    await store.append([measured])
    assert (await evaluation(store, item)).status == "running"

    # When completed: the statistics are there
    await store.append([completed])
    view = await evaluation(store, item)
    assert view.status == "completed"
    assert view.result == latency()
    assert view.error is None
    assert view.requested_at == at(0)
    assert view.updated_at == at(4)
    assert view.last_position == (await store.read_all())[-1].position


async def test_a_failed_evaluation_says_where_and_why(store: EventStore) -> None:
    # Given an evaluation that started and then crashed in the framework
    item = Evaluation()
    await store.append([item.requested(at(0)), item.scheduled(at(1)), item.started(at(2))])

    # When the failure is recorded
    await store.append([item.failed(at(3), reason="CUDA out of memory")])

    # Then it is failed, with the stage and the reason, and no result
    view = await evaluation(store, item)
    assert view.status == "failed"
    assert view.error == "predictor: CUDA out of memory"
    assert view.result is None


async def test_a_late_event_fills_details_but_never_moves_status_back(store: EventStore) -> None:
    # Given the analyzer's completion overtook the scheduler's and the worker's events
    item = Evaluation(agent_id="agent-3")
    await store.append([item.requested(at(0)), item.completed(at(4))])
    assert (await evaluation(store, item)).status == "completed"

    # When the scheduled, started and a stray failure arrive after it
    await store.append([item.started(at(2)), item.scheduled(at(1))])
    await store.append([item.failed(at(5), reason="timeout echo")])

    # Then it stays completed, yet knows the version and agent the late events told
    view = await evaluation(store, item)
    assert view.status == "completed"
    assert view.result == latency()
    assert (view.model_version, view.agent_id) == ("1.3.0", "agent-3")
    assert view.updated_at == at(5)


async def test_a_failure_is_final(store: EventStore) -> None:
    # Given an evaluation that failed while scheduled
    item = Evaluation()
    await store.append([item.requested(at(0)), item.scheduled(at(1)), item.failed(at(2))])

    # When the worker's started arrives late, then a second failure
    await store.append([item.started(at(1.5)), item.failed(at(3), reason="later echo")])
    # and a worker frozen past the failure wakes, measures, and its measurement is completed
    await store.append([item.measured(at(62))])
    await store.append([item.completed(at(63))])

    # Then it is still failed with the first reason, and shows no result beside it
    view = await evaluation(store, item)
    assert (view.status, view.error) == ("failed", "predictor: CUDA out of memory")
    assert view.result is None
    # while the log keeps every event, the second outcome included
    assert [e.type for e in await store.stream_events(item.stream)][-2:] == [
        "evaluation.measured",
        "evaluation.completed",
    ]


async def test_an_event_for_an_evaluation_nobody_requested_makes_no_row(
    store: EventStore,
) -> None:
    # Given a failure about an evaluation whose request was never recorded (a malformed
    # message naming a random id, or a request not stored yet)
    item = Evaluation()

    # When appended: it is kept in the log, but nobody asked for that evaluation
    assert await store.append([item.failed(at(7), reason="no such model")]) == [True]
    assert [e.type for e in await store.stream_events(item.stream)] == ["evaluation.failed"]
    assert await store.get_evaluation(item.evaluation_id) is None
    assert await store.list_evaluations() == []

    # and a request arriving after all makes the row, with the failure folded in after it
    await store.append([item.requested(at(6))])
    view = await evaluation(store, item)
    assert (view.status, view.error) == ("failed", "predictor: no such model")
    assert (view.model, view.requested_at, view.updated_at) == ("resnet50", at(6), at(7))
    assert view.last_position == (await store.read_all())[-1].position


async def test_evaluations_are_listed_newest_first(store: EventStore) -> None:
    # Given five evaluations requested a minute apart, the newest two completed
    items = [Evaluation() for _ in range(5)]
    batch = [item.requested(at(60 * n)) for n, item in enumerate(items)]
    batch += [items[3].completed(at(400)), items[4].completed(at(500))]
    await store.append(batch)

    def ids(views: list[EvaluationView]) -> list[uuid.UUID]:
        return [view.evaluation_id for view in views]

    newest_first = [item.evaluation_id for item in reversed(items)]
    # Then listing gives the newest first, page by page
    assert ids(await store.list_evaluations()) == newest_first
    assert ids(await store.list_evaluations(limit=2)) == newest_first[:2]
    assert ids(await store.list_evaluations(limit=2, offset=2)) == newest_first[2:4]
    assert ids(await store.list_evaluations(offset=5)) == []
    # and a status filter keeps only those in that state
    assert ids(await store.list_evaluations(status="completed")) == newest_first[:2]
    assert ids(await store.list_evaluations(status="requested", limit=1)) == newest_first[2:3]
    assert await store.list_evaluations(status="running") == []
    with pytest.raises(ValueError, match="unknown status"):
        await store.list_evaluations(status="done")


async def test_each_attempt_is_recorded_and_the_latest_is_the_evaluations(
    store: EventStore,
) -> None:
    # Given a job whose first worker started it and was killed, and which the broker then
    # delivered to a second worker: both start from the same job message
    item = Evaluation(agent_id="agent-1")
    job = item.scheduled(at(1))
    first = job.caused(
        EvaluationStarted(
            evaluation_id=item.evaluation_id,
            agent_id="agent-1",
            host="bench-1",
            environment={"cpu": "EPYC 7763"},
        ),
        producer="worker",
    )
    second = job.caused(
        EvaluationStarted(
            evaluation_id=item.evaluation_id,
            agent_id="agent-2",
            host="bench-2",
            environment={"cpu": "Xeon 8480"},
            attempt=2,
        ),
        producer="worker",
        key="attempt-2",
    )

    # When both starts are recorded, and the second is delivered twice
    await store.append([item.requested(at(0)), job, first])
    assert await store.append([second, second]) == [True, False]

    # Then the log keeps both attempts, each with its own agent and environment
    started = [e for e in await store.stream_events(item.stream) if e.type == "evaluation.started"]
    assert [(e.payload["agent_id"], e.payload["environment"]) for e in started] == [
        ("agent-1", {"cpu": "EPYC 7763"}),
        ("agent-2", {"cpu": "Xeon 8480"}),
    ]
    assert [e.payload.get("attempt", 1) for e in started] == [1, 2]
    # and the evaluation is the second attempt's, running
    view = await evaluation(store, item)
    assert (view.status, view.attempts, view.agent_id, view.host) == (
        "running",
        2,
        "agent-2",
        "bench-2",
    )
    assert view.environment == {"cpu": "Xeon 8480"}


@pytest.mark.parametrize("order", ["in order", "overtaken"])
async def test_the_latest_attempt_wins_whatever_order_its_events_arrive_in(
    store: EventStore, order: str
) -> None:
    # Given two attempts, whose events may overtake each other on a busy broker
    item = Evaluation(agent_id="agent-1")
    events = [
        item.started(at(2), attempt=1, agent_id="agent-1", host="bench-1"),
        item.started(at(9), attempt=2, agent_id="agent-2", host="bench-2"),
        item.measured(at(12), attempt=2, agent_id="agent-2"),
    ]
    if order == "overtaken":
        events = [events[2], events[1], events[0]]

    # When recorded one by one
    await store.append([item.requested(at(0))])
    for envelope in events:
        await store.append([envelope])

    # Then the evaluation is the second attempt's either way
    view = await evaluation(store, item)
    assert (view.attempts, view.agent_id, view.host) == (2, "agent-2", "bench-2")
    assert view.environment == {"onnxruntime": "1.31.1", "host": "bench-2"}


async def test_a_terminal_evaluation_is_not_moved_back_by_a_late_attempt(
    store: EventStore,
) -> None:
    # Given an evaluation completed by its first attempt
    item = Evaluation(agent_id="agent-1")
    await store.append(item.lifecycle(start=0))

    # When a second attempt (the job delivered again) starts, measures and is completed
    await store.append([item.started(at(10), attempt=2, agent_id="agent-2")])
    await store.append([item.measured(at(11), attempt=2, agent_id="agent-2")])
    await store.append([item.completed(at(12), p50_ms=9.9)])

    # Then it stays completed with the first result; the attempt is counted and kept
    view = await evaluation(store, item)
    assert (view.status, view.attempts) == ("completed", 2)
    assert view.result == latency()
    assert len(await store.stream_events(item.stream)) == 8

    # And a failed evaluation's late measurement leaves it failed
    crashed = Evaluation()
    await store.append([crashed.requested(at(0)), crashed.started(at(1)), crashed.failed(at(2))])
    await store.append([crashed.measured(at(3))])
    view = await evaluation(store, crashed)
    assert (view.status, view.error) == ("failed", "predictor: CUDA out of memory")


async def test_an_evaluation_recorded_before_attempts_were_counted_is_one_attempt(
    store: EventStore,
) -> None:
    # Given a start as published before the attempt field existed
    item = Evaluation()
    old = item.started(at(2))
    payload = {k: v for k, v in old.payload.items() if k != "attempt"}
    await store.append([item.requested(at(0)), old.model_copy(update={"payload": payload})])

    # Then it reads as the first attempt, and is still a valid message
    view = await evaluation(store, item)
    assert (view.attempts, view.host) == (1, "bench-1")
    assert (await store.stream_events(item.stream))[1].envelope().open(
        EvaluationStarted
    ).attempt == 1


# --- the agents projection ------------------------------------------------------------------


async def test_an_agent_is_followed_online_busy_and_offline(store: EventStore) -> None:
    worker = Agent("agent-gpu-1")

    # Given an agent that announced itself
    await store.append([worker.online(at(0))])
    view = await agent(store, "agent-gpu-1")
    assert (view.status, view.busy, view.host, view.framework) == (
        "online",
        False,
        "bench-1",
        "onnxruntime",
    )
    assert view.capabilities == {"providers": ["CPUExecutionProvider"]}
    assert view.heartbeat_interval_s == 5.0
    assert view.last_seen == at(0)

    # When it reports being busy
    await store.append([worker.heartbeat(at(5), busy=True)])
    view = await agent(store, "agent-gpu-1")
    assert (view.status, view.busy, view.last_seen) == ("online", True, at(5))

    # When it goes offline
    await store.append([worker.offline(at(8))])
    view = await agent(store, "agent-gpu-1")
    assert (view.status, view.busy, view.last_seen) == ("offline", False, at(5))

    # Then a heartbeat sent before it went offline, delivered late, does not revive it
    await store.append([worker.heartbeat(at(7), busy=True)])
    view = await agent(store, "agent-gpu-1")
    assert (view.status, view.busy, view.last_seen) == ("offline", False, at(7))

    # but announcing itself again does
    await store.append([worker.online(at(20))])
    assert (await agent(store, "agent-gpu-1")).status == "online"


async def test_a_heartbeat_or_offline_notice_saying_nothing_of_an_unknown_agent_lists_none(
    store: EventStore,
) -> None:
    # Given a heartbeat and an offline notice from an agent nobody has heard of, neither
    # saying what it runs (no worker's: a worker's heartbeat always says it)
    await store.append([Agent("agent-x").heartbeat(at(3), busy=True)])
    await store.append(
        [
            event(
                AgentOffline(agent_id="agent-z", reason="gone"),
                stream_id=agent_stream("agent-z"),
                correlation_id=uuid.uuid4(),
                when=at(3),
            )
        ]
    )

    # Then no agent is listed for them: no phantom agents
    assert {view.agent_id for view in await store.list_agents()} == set()
    # and the agent announcing itself is listed, its heartbeats counted from then on
    await store.append([Agent("agent-x").online(at(4))])
    await store.append([Agent("agent-x").heartbeat(at(5), busy=True)])
    view = await agent(store, "agent-x")
    assert (view.status, view.host, view.busy, view.last_seen) == ("online", "bench-1", True, at(5))


async def test_a_heartbeat_that_says_who_it_is_fills_a_missed_announcement(
    store: EventStore,
) -> None:
    # Given an agent whose announcement no recorder saw, heartbeating with its identity
    beat = AgentHeartbeat(
        agent_id="agent-y",
        busy=False,
        host="bench-2",
        framework="pytorch",
        framework_version="2.13.0",
        hardware="cpu",
    )
    await store.append(
        [event(beat, stream_id=agent_stream("agent-y"), correlation_id=uuid.uuid4(), when=at(3))]
    )

    # Then the agents read model knows what it runs
    view = await agent(store, "agent-y")
    assert (view.host, view.framework, view.framework_version, view.hardware) == (
        "bench-2",
        "pytorch",
        "2.13.0",
        "cpu",
    )


async def test_events_of_other_types_are_stored_but_change_no_projection(
    store: EventStore,
) -> None:
    # Given a scheduler's discovery call, which is about no agent in particular
    discover = event(
        AgentsDiscover(requested_by="scheduler-1"),
        stream_id="scheduler-scheduler-1",
        correlation_id=uuid.uuid4(),
        when=at(0),
    )

    # When appended, then it is in the log and nowhere else
    assert await store.append([discover]) == [True]
    assert [e.type for e in await store.read_all()] == ["agent.discover"]
    assert await store.list_agents() == []
    assert await store.list_evaluations() == []


# --- rebuilding -----------------------------------------------------------------------------


async def test_rebuilding_the_projections_gives_the_same_rows(store: EventStore) -> None:
    # Given a realistic day: evaluations completing, failing, in flight, out of order, with
    # redeliveries, agents coming and going, and events no projection cares about
    done, crashed, running, overtaken, orphan, retried, unrequested = (
        Evaluation(agent_id=f"a{n}") for n in range(7)
    )
    workers = [Agent("a0"), Agent("a1"), Agent("a2")]
    done_events = done.lifecycle(start=10)
    batches = [
        [w.online(at(n)) for n, w in enumerate(workers)],
        [*done_events[:3], workers[0].heartbeat(at(12), busy=True)],
        [crashed.requested(at(20)), crashed.scheduled(at(21)), crashed.failed(at(22))],
        [*done_events[3:], running.requested(at(30)), running.started(at(32))],
        [overtaken.requested(at(40)), overtaken.completed(at(44)), overtaken.started(at(42))],
        [
            orphan.failed(at(50)),
            workers[2].offline(at(51)),
            workers[1].heartbeat(at(52), busy=False),
        ],
        [
            event(
                AgentsDiscover(requested_by="scheduler-1"),
                stream_id="scheduler-scheduler-1",
                correlation_id=uuid.uuid4(),
                when=at(53),
            ),
            crashed.failed(at(54), reason="echo"),
            workers[2].heartbeat(at(50.5), busy=True),
        ],
        # A job whose worker was killed: attempt 2 overtakes attempt 1's start, then completes
        [retried.requested(at(60)), retried.started(at(63), attempt=2, agent_id="a1")],
        [retried.started(at(61), agent_id="a2", host="bench-2"), retried.completed(at(65))],
        [retried.measured(at(64), attempt=2, agent_id="a1"), retried.completed(at(66), 7.0)],
        # Events whose request is stored after them: folded in when it comes
        [unrequested.scheduled(at(71)), unrequested.failed(at(72))],
        [unrequested.completed(at(73)), unrequested.requested(at(70))],
    ]
    for batch in batches:
        await store.append(batch)
    await store.append(batches[1] + batches[4])  # redelivered: no-ops
    evaluations_before = await store.list_evaluations(limit=100)
    agents_before = await store.list_agents()
    # The orphan's failure, about an evaluation nobody requested, made no row
    assert len(evaluations_before) == 6
    assert orphan.evaluation_id not in {view.evaluation_id for view in evaluations_before}
    assert len(agents_before) == 3
    by_id = {view.evaluation_id: view for view in evaluations_before}
    late = by_id[unrequested.evaluation_id]
    assert (late.status, late.error, late.result) == (
        "failed",
        "predictor: CUDA out of memory",
        None,
    )
    assert (by_id[retried.evaluation_id].attempts, by_id[retried.evaluation_id].agent_id) == (
        2,
        "a1",
    )

    # When the projections are rebuilt from the log
    replayed = await store.rebuild_projections()

    # Then every event was replayed and the rows are exactly the same
    assert replayed == await store.count_events() == sum(len(batch) for batch in batches)
    assert await store.list_evaluations(limit=100) == evaluations_before
    assert await store.list_agents() == agents_before


# --- tracing --------------------------------------------------------------------------------


async def test_each_event_keeps_the_trace_it_belongs_to(store: EventStore) -> None:
    item = Evaluation()
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    traceparent = f"00-{trace_id}-00f067aa0ba902b7-01"

    # Given a traced request, and a message published without a trace context
    traced = item.requested(at(0)).model_copy(update={"traceparent": traceparent})
    untraced = item.scheduled(at(1))

    # When appended
    await store.append([traced, untraced])

    # Then the first keeps its trace and the second is in the one derived from the correlation id
    first, second = await store.stream_events(item.stream)
    assert (first.trace_id, first.traceparent) == (trace_id, traceparent)
    assert second.trace_id == trace_id_of(None, item.evaluation_id)
    assert second.traceparent is None
    # and the evaluation links to the request's trace
    assert (await evaluation(store, item)).trace_id == trace_id


# --- quarantine: what the wire contracts no longer admit --------------------------------------


def legacy(item: Evaluation, type_: str, payload: dict[str, Any], when: datetime) -> Envelope:
    """An event as a recorder without admission checks stored it: any type, any payload."""
    return Envelope(
        type=type_,
        stream_id=item.stream,
        correlation_id=item.evaluation_id,
        occurred_at=when,
        payload=payload,
    )


async def test_events_the_contracts_refuse_are_found_and_quarantined_out_of_the_projections(
    store: EventStore,
) -> None:
    # Given an evaluation that is running, and two events stored before admission checks:
    # a completion whose result is garbage and an event of a type nobody knows
    item = Evaluation()
    running = item.lifecycle(0)[:4]
    await store.append(running)
    bogus = legacy(
        item,
        "evaluation.completed",
        {"evaluation_id": str(item.evaluation_id), "result": "garbage"},
        at(5),
    )
    unknown = legacy(item, "totally.unknown.type", {"anything": 1}, at(6))
    await store.append([bogus, unknown])
    # which the projections, reading each payload as its contract does, pass over
    assert (await evaluation(store, item)).status == "running"

    # When the log is checked
    found = await find_inadmissible(store)

    # Then exactly those two are found, each with the reason the recorder would give today
    assert [(f.event.event_id, f.event.type) for f in found] == [
        (bogus.event_id, "evaluation.completed"),
        (unknown.event_id, "totally.unknown.type"),
    ]
    assert "result" in found[0].reason
    assert "unknown message type 'totally.unknown.type'" in found[1].reason

    # When they are quarantined
    assert await quarantine_inadmissible(store, found) == 2

    # Then the log no longer holds them, the quarantine does, and the projection is rebuilt
    # without them: the evaluation is still running
    assert [e.event_id for e in await store.stream_events(item.stream)] == [
        e.event_id for e in running
    ]
    assert await store.count_quarantined() == 2
    assert (await evaluation(store, item)).status == "running"
    assert await find_inadmissible(store) == []
    assert await quarantine_inadmissible(store, []) == 0

    # and the real completion still appends after them
    assert await store.append([item.completed(at(7))]) == [True]
    assert (await evaluation(store, item)).status == "completed"


async def test_a_sweeps_loads_are_found_by_its_id_in_the_order_they_were_requested(
    store: EventStore,
) -> None:
    # Given three loads of one sweep (the middle one measured twice), one of another sweep
    # and an evaluation of no sweep
    sweep, other = uuid.uuid4(), uuid.uuid4()
    loads = [(sweep, 1.0), (sweep, 4.0), (sweep, 4.0), (other, 1.0), (sweep, 16.0), (None, 0)]
    items = [Evaluation() for _ in loads]
    for second, (item, (sweep_id, level)) in enumerate(zip(items, loads, strict=True)):
        point = (
            None if sweep_id is None else SweepPoint(sweep_id=sweep_id, over="streams", level=level)
        )
        requested = event(
            EvaluationRequested(
                evaluation_id=item.evaluation_id,
                model=item.model,
                framework="onnxruntime",
                sweep=point,
            ),
            stream_id=item.stream,
            correlation_id=item.evaluation_id,
            when=at(second),
        )
        assert await store.append([requested]) == [True]

    # When the sweep's loads are read
    found = await store.list_sweep(sweep)

    # Then they are its four evaluations, as requested, each knowing its sweep
    assert [view.evaluation_id for view in found] == [items[i].evaluation_id for i in (0, 1, 2, 4)]
    assert {view.sweep_id for view in found} == {sweep}
    assert [view.request["sweep"]["level"] for view in found if view.request] == [1, 4, 4, 16]
    assert (await evaluation(store, items[5])).sweep_id is None
    assert [v.evaluation_id for v in await store.list_sweep(other)] == [items[3].evaluation_id]
    assert await store.list_sweep(uuid.uuid4()) == []


# --- the schema and the database ------------------------------------------------------------


async def test_upgrade_is_idempotent_and_reports_the_head_revision(database_url: str) -> None:
    # Given a database never migrated
    assert await current_revision(database_url) is None

    # When upgraded twice
    await upgrade(database_url)
    await upgrade(database_url)

    # Then it is at the newest revision and a store works on it
    assert await current_revision(database_url) == head_revision() == "0007"
    async with EventStore.from_url(database_url) as store:
        await store.ping()
        assert await store.count_events() == 0


async def test_a_store_on_an_unmigrated_database_says_to_migrate(database_url: str) -> None:
    async with EventStore.from_url(database_url) as store:
        with pytest.raises(ConfigurationError, match="run the migrations"):
            await store.count_events()


async def test_an_unreachable_database_is_reported_as_unavailable() -> None:
    async with EventStore.from_url("postgresql+asyncpg://postgres@127.0.0.1:1/x") as store:
        with pytest.raises(StoreUnavailable, match="unavailable"):
            await store.ping()
        with pytest.raises(StoreUnavailable):
            await store.append([Evaluation().requested(at(0))])


async def test_concurrent_writers_never_share_a_version(database_url: str) -> None:
    # Given two stores (as two recorder processes would have) on one database
    await upgrade(database_url)
    item = Evaluation()
    first, second = EventStore.from_url(database_url), EventStore.from_url(database_url)
    try:
        # When both append to the same stream at the same time
        events = [item.requested(at(0))] + [item.measured(at(n)) for n in range(1, 12)]
        outcomes = await asyncio.gather(
            *((first if n % 2 else second).append([envelope]) for n, envelope in enumerate(events))
        )

        # Then every event is stored once, and the stream is numbered 1..n without gaps
        assert outcomes == [[True]] * len(events)
        stored = await first.stream_events(item.stream)
        assert sorted(e.event_id for e in stored) == sorted(e.event_id for e in events)
        assert [e.version for e in stored] == list(range(1, len(events) + 1))
        assert (await evaluation(first, item)).status == "running"
    finally:
        await first.close()
        await second.close()
