"""The artifacts projection: registered manifest versions, for the registry and the gateway.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 23:30:00

Written by hand to match shared/eventstore/schema.py.
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
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
        "artifacts",
        sa.Column("ref", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("version", sa.Text(), nullable=False),
        sa.Column("digest", sa.Text(), nullable=False),
        sa.Column("manifest", _json(), nullable=False),
        sa.Column("framework", sa.Text(), nullable=True),
        sa.Column("task", sa.Text(), nullable=True),
        sa.Column("deprecated", sa.Boolean(), nullable=False),
        sa.Column("deprecation_reason", sa.Text(), nullable=True),
        sa.Column("registered_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("ref", name=op.f("pk_artifacts")),
    )
    op.create_index(op.f("ix_artifacts_kind_name"), "artifacts", ["kind", "name"])


def downgrade() -> None:
    op.drop_index(op.f("ix_artifacts_kind_name"), table_name="artifacts")
    op.drop_table("artifacts")
