"""Attempts of an evaluation: the latest attempt's host and environment, and how many.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-05 12:00:00

Written by hand to match shared/eventstore/schema.py. Rows projected before this revision
read 0 attempts and no host until the projections are rebuilt
(``dlscope db rebuild-projections``); the events themselves hold everything.
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON(none_as_null=True).with_variant(
        postgresql.JSONB(none_as_null=True), "postgresql"
    )


def upgrade() -> None:
    # batch: SQLite alters a table by copying it; PostgreSQL just adds the columns.
    with op.batch_alter_table("evaluations") as table:
        table.add_column(sa.Column("host", sa.Text(), nullable=True))
        table.add_column(sa.Column("environment", _json(), nullable=True))
        table.add_column(
            sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )


def downgrade() -> None:
    with op.batch_alter_table("evaluations") as table:
        table.drop_column("attempts")
        table.drop_column("environment")
        table.drop_column("host")
