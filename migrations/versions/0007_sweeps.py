"""Sweeps: the sweep an evaluation is a load of, as a column of its row.

Revision ID: 0007
Revises: 0006
Create Date: 2027-02-01 12:00:00

Written by hand to match shared/eventstore/schema.py. ``dlscope sweep`` labels each load's
request with its sweep (``EvaluationRequested.sweep``); the projection copies the sweep's id
here so a sweep's page finds its loads by an index, not by reading every request. Rows of
evaluations requested before this revision have no sweep, as their requests had none.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("evaluations", sa.Column("sweep_id", sa.Uuid(), nullable=True))
    op.create_index("ix_evaluations_sweep_id", "evaluations", ["sweep_id"])


def downgrade() -> None:
    op.drop_index("ix_evaluations_sweep_id", table_name="evaluations")
    with op.batch_alter_table("evaluations") as table:  # SQLite drops a column by a copy
        table.drop_column("sweep_id")
