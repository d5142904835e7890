"""What the event store answers: the log's events (one stream's, several streams', all of
them in order) and the rows of its projections (evaluations, experiments, agents, artifacts).
Reads go on while a writer holds its transaction; they see what it committed before."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Executable, RowMapping, Select, Table, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from shared.eventstore import schema
from shared.eventstore.database import Database
from shared.eventstore.sql import one_of
from shared.eventstore.views import (
    EVALUATION_STATUSES,
    EXPERIMENT_STATUSES,
    AgentView,
    ArtifactView,
    EvaluationView,
    ExperimentView,
    StoredEvent,
)

__all__ = ["StoreReader", "read_events"]

_events = schema.events
_evaluations = schema.evaluations
_agents = schema.agents
_artifacts = schema.artifacts
_experiments = schema.experiments
_quarantined = schema.quarantined_events


class StoreReader(Database):
    """The event store's reads (``EventStore`` adds its writes)."""

    async def get_evaluation(self, evaluation_id: uuid.UUID) -> EvaluationView | None:
        row = await self._row(
            select(_evaluations).where(_evaluations.c.evaluation_id == evaluation_id)
        )
        return None if row is None else EvaluationView.from_row(row)

    async def list_evaluations(
        self,
        *,
        limit: int = 50,
        offset: int = 0,
        status: str | None = None,
        model: str | None = None,
        framework: str | None = None,
        hardware: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[EvaluationView]:
        """Evaluations, most recently requested first; only those in ``status``, of
        ``model``, ``framework`` and ``hardware``, requested in [``since``, ``until``), for
        those given."""
        if status is not None and status not in EVALUATION_STATUSES:
            raise ValueError(f"unknown status {status!r}; one of {', '.join(EVALUATION_STATUSES)}")
        columns = _evaluations.c
        query = _where_given(
            _newest_first(_evaluations, limit=limit, offset=offset),
            (columns.status, status),
            (columns.model, model),
            (columns.framework, framework),
            (columns.hardware, hardware),
        )
        if since is not None:
            query = query.where(columns.requested_at >= since)
        if until is not None:
            query = query.where(columns.requested_at < until)
        return [EvaluationView.from_row(row) for row in await self._rows(query)]

    async def list_sweep(self, sweep_id: uuid.UUID, *, limit: int = 256) -> list[EvaluationView]:
        """The evaluations labelled as loads of ``sweep_id``, in the order they were
        requested (a load measured twice appears twice), at most ``limit``."""
        columns = _evaluations.c
        query = (
            select(_evaluations)
            .where(columns.sweep_id == sweep_id)
            .order_by(columns.requested_at, columns.evaluation_id)
            .limit(limit)
        )
        return [EvaluationView.from_row(row) for row in await self._rows(query)]

    async def get_evaluations(self, evaluation_ids: Sequence[uuid.UUID]) -> list[EvaluationView]:
        """The evaluations among ``evaluation_ids`` that have a row, in no particular order."""
        if not evaluation_ids:
            return []
        async with self._reading() as connection:
            column = _evaluations.c.evaluation_id
            query = select(_evaluations).where(
                one_of(connection.dialect.name, column, set(evaluation_ids))
            )
            rows = (await connection.execute(query)).mappings().all()
        return [EvaluationView.from_row(row) for row in rows]

    async def get_experiment(self, experiment_id: uuid.UUID) -> ExperimentView | None:
        row = await self._row(
            select(_experiments).where(_experiments.c.experiment_id == experiment_id)
        )
        return None if row is None else ExperimentView.from_row(row)

    async def list_experiments(
        self,
        *,
        limit: int = 50,
        offset: int = 0,
        status: str | None = None,
        model: str | None = None,
    ) -> list[ExperimentView]:
        """Experiments, most recently requested first; only those in ``status`` and of the
        reference ``model``, if given."""
        if status is not None and status not in EXPERIMENT_STATUSES:
            raise ValueError(f"unknown status {status!r}; one of {', '.join(EXPERIMENT_STATUSES)}")
        query = _where_given(
            _newest_first(_experiments, limit=limit, offset=offset),
            (_experiments.c.status, status),
            (_experiments.c.model, model),
        )
        return [ExperimentView.from_row(row) for row in await self._rows(query)]

    async def list_agents(self) -> list[AgentView]:
        rows = await self._rows(select(_agents).order_by(_agents.c.agent_id))
        return [AgentView.from_row(row) for row in rows]

    async def jobs_by_agent(self) -> dict[str, dict[str, int]]:
        """How many evaluations each agent holds, by status: ``running`` (running there now),
        ``completed`` and ``failed`` (run there: the latest attempt's agent), ``scheduled``
        (pinned to it, not started yet)."""
        query = (
            select(_evaluations.c.agent_id, _evaluations.c.status, func.count())
            .where(_evaluations.c.agent_id.is_not(None))
            .group_by(_evaluations.c.agent_id, _evaluations.c.status)
        )
        async with self._reading() as connection:
            rows = (await connection.execute(query)).all()
        counts: dict[str, dict[str, int]] = {}
        for agent_id, status, count in rows:
            counts.setdefault(agent_id, {})[status] = int(count)
        return counts

    async def list_artifacts(
        self,
        *,
        kind: str | None = None,
        name: str | None = None,
        framework: str | None = None,
        task: str | None = None,
        include_deprecated: bool = False,
    ) -> list[ArtifactView]:
        """Registered manifest versions, by kind and name, oldest version first."""
        query = _where_given(
            select(_artifacts).order_by(
                _artifacts.c.kind, _artifacts.c.name, _artifacts.c.registered_at
            ),
            (_artifacts.c.kind, kind),
            (_artifacts.c.name, name),
            (_artifacts.c.framework, framework),
            (_artifacts.c.task, task),
        )
        if not include_deprecated:
            query = query.where(_artifacts.c.deprecated.is_(False))
        # A deprecation that overtook its registration leaves a row without a manifest.
        query = query.where(_artifacts.c.digest != "")
        return [ArtifactView.from_row(row) for row in await self._rows(query)]

    async def stream_events(self, stream_id: str) -> list[StoredEvent]:
        """One stream's events in version order (1, 2, 3, …)."""
        query = select(_events).where(_events.c.stream_id == stream_id).order_by(_events.c.version)
        return [StoredEvent.from_row(row) for row in await self._rows(query)]

    async def read_streams(self, stream_ids: Collection[str]) -> list[StoredEvent]:
        """The events of several streams (e.g. an experiment and its members'), in position
        order: the order they were recorded in."""
        if not stream_ids:
            return []
        async with self._reading() as connection:
            column = _events.c.stream_id
            query = (
                select(_events)
                .where(one_of(connection.dialect.name, column, set(stream_ids)))
                .order_by(_events.c.position)
            )
            rows = (await connection.execute(query)).mappings().all()
        return [StoredEvent.from_row(row) for row in rows]

    async def read_all(self, *, after: int = 0, limit: int = 1000) -> list[StoredEvent]:
        """Up to ``limit`` events with a position greater than ``after``, in position order."""
        async with self._reading() as connection:
            return await read_events(connection, after, limit)

    async def count_events(self) -> int:
        async with self._reading() as connection:
            count = await connection.scalar(select(func.count()).select_from(_events))
        return int(count or 0)

    async def count_quarantined(self) -> int:
        """How many events ``quarantine`` has moved out of the log so far."""
        async with self._reading() as connection:
            count = await connection.scalar(select(func.count()).select_from(_quarantined))
        return int(count or 0)

    async def _row(self, query: Executable) -> RowMapping | None:
        """The first row ``query`` selects, if any."""
        async with self._reading() as connection:
            return (await connection.execute(query)).mappings().first()

    async def _rows(self, query: Executable) -> Sequence[RowMapping]:
        """Every row ``query`` selects."""
        async with self._reading() as connection:
            return (await connection.execute(query)).mappings().all()


def _newest_first(table: Table, *, limit: int, offset: int) -> Select[Any]:
    """A page of ``table``'s rows, most recently requested first (then by key, descending)."""
    if limit < 0 or offset < 0:
        raise ValueError("limit and offset must not be negative")
    (key,) = table.primary_key.columns
    return (
        select(table).order_by(table.c.requested_at.desc(), key.desc()).limit(limit).offset(offset)
    )


def _where_given(query: Select[Any], *filters: tuple[ColumnElement[Any], object]) -> Select[Any]:
    """``query`` with each column equal to its value, for the values given (not None)."""
    for column, value in filters:
        if value is not None:
            query = query.where(column == value)
    return query


async def read_events(connection: AsyncConnection, after: int, limit: int) -> list[StoredEvent]:
    """Up to ``limit`` events with a position greater than ``after``, in position order."""
    query = (
        select(_events).where(_events.c.position > after).order_by(_events.c.position).limit(limit)
    )
    rows = (await connection.execute(query)).mappings().all()
    return [StoredEvent.from_row(row) for row in rows]
