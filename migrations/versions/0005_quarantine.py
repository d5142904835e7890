"""Quarantine: events moved out of the log because the wire contracts do not admit them.

Revision ID: 0005
Revises: 0004
Create Date: 2027-01-10 12:00:00

Written by hand to match shared/eventstore/schema.py. Only creates the table: finding the
stored events the contracts reject is code (``dlscope db check``), since what is admitted
changes with the contracts, not with the schema. Run ``dlscope db check --quarantine`` after
upgrading to move them here.
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
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
        "quarantined_events",
        sa.Column("position", sa.BigInteger(), autoincrement=False, nullable=False),
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
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("quarantined_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("position", name="pk_quarantined_events"),
        sa.UniqueConstraint("event_id", name="uq_quarantined_events_event_id"),
    )


def downgrade() -> None:
    op.drop_table("quarantined_events")
