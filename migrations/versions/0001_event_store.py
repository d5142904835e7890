"""The event store: the events log and the evaluations and agents projections.

Revision ID: 0001
Revises:
Create Date: 2025-01-01 00:00:00

Written by hand to match shared/eventstore/schema.py.
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON(none_as_null=True).with_variant(
        postgresql.JSONB(none_as_null=True), "postgresql"
    )


def _timestamp() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column(
            "position",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("stream_id", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("payload", _json(), nullable=False),
        sa.Column("metadata", _json(), nullable=False),
        sa.Column("correlation_id", sa.Uuid(), nullable=False),
        sa.Column("occurred_at", _timestamp(), nullable=False),
        sa.Column("recorded_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("position", name="pk_events"),
        sa.UniqueConstraint("event_id", name="uq_events_event_id"),
        sa.UniqueConstraint("stream_id", "version", name="uq_events_stream_id_version"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_events_type", "events", ["type"])
    op.create_index("ix_events_correlation_id", "events", ["correlation_id"])

    op.create_table(
        "evaluations",
        sa.Column("evaluation_id", sa.Uuid(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("model", sa.Text()),
        sa.Column("model_version", sa.Text()),
        sa.Column("framework", sa.Text()),
        sa.Column("hardware", sa.Text()),
        sa.Column("agent_id", sa.Text()),
        sa.Column("trace_id", sa.Text(), nullable=False),
        sa.Column("request", _json()),
        sa.Column("result", _json()),
        sa.Column("error", sa.Text()),
        sa.Column("requested_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("evaluation_id", name="pk_evaluations"),
    )
    op.create_index("ix_evaluations_requested_at", "evaluations", ["requested_at"])
    op.create_index("ix_evaluations_status_requested_at", "evaluations", ["status", "requested_at"])

    op.create_table(
        "agents",
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("host", sa.Text()),
        sa.Column("framework", sa.Text()),
        sa.Column("framework_version", sa.Text()),
        sa.Column("hardware", sa.Text()),
        sa.Column("capabilities", _json()),
        sa.Column("heartbeat_interval_s", sa.Float()),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("busy", sa.Boolean(), nullable=False),
        sa.Column("last_seen", _timestamp()),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("agent_id", name="pk_agents"),
    )


def downgrade() -> None:
    op.drop_table("agents")
    op.drop_index("ix_evaluations_status_requested_at", table_name="evaluations")
    op.drop_index("ix_evaluations_requested_at", table_name="evaluations")
    op.drop_table("evaluations")
    op.drop_index("ix_events_correlation_id", table_name="events")
    op.drop_index("ix_events_type", table_name="events")
    op.drop_table("events")
