"""The experiments projection: one model on every matching system, and the comparison.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-28 12:00:00

Written by hand to match shared/eventstore/schema.py.
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
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
        "experiments",
        sa.Column("experiment_id", sa.Uuid(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=True),
        sa.Column("trace_id", sa.Text(), nullable=False),
        sa.Column("request", _json(), nullable=True),
        sa.Column("members", _json(), nullable=True),
        sa.Column("skipped", _json(), nullable=True),
        sa.Column("comparison", _json(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("requested_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("experiment_id", name=op.f("pk_experiments")),
    )
    op.create_index(op.f("ix_experiments_requested_at"), "experiments", ["requested_at"])
    op.create_index(
        op.f("ix_experiments_status_requested_at"), "experiments", ["status", "requested_at"]
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_experiments_status_requested_at"), table_name="experiments")
    op.drop_index(op.f("ix_experiments_requested_at"), table_name="experiments")
    op.drop_table("experiments")
