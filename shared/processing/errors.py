"""The error processing raises (defined with the others, in ``shared.errors``)."""

from __future__ import annotations

from shared.errors import ProcessingError

__all__ = ["ProcessingError"]
