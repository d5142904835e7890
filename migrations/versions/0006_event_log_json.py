"""The log's documents as JSON text, not JSONB, on PostgreSQL.

Revision ID: 0006
Revises: 0005
Create Date: 2027-01-20 12:00:00

Written by hand to match shared/eventstore/schema.py. An event's payload and metadata are
written once and read whole, never searched inside, so PostgreSQL's parse into JSONB bought
nothing and cost half the log's write throughput: on a 2-core host, inserting the bench's
event mix (about 1 KB a payload) ran at about 14 000 rows/s as JSONB and 26 000 as JSON
(BENCHMARKS.md, issue 24). The projections' documents stay JSONB. SQLite keeps JSON text
already; nothing changes there.
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("events", "quarantined_events")
_COLUMNS = ("payload", "metadata")


def _alter(to: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in _TABLES:
        for column in _COLUMNS:
            op.alter_column(
                table,
                column,
                type_=postgresql.JSON(none_as_null=True)
                if to == "json"
                else postgresql.JSONB(none_as_null=True),
                postgresql_using=f"{column}::{to}",
            )


def upgrade() -> None:
    _alter("json")


def downgrade() -> None:
    _alter("jsonb")
