"""How much an artifact may cost a worker: bytes downloaded, bytes extracted, time waited."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ArtifactLimits"]

GiB = 1 << 30


class ArtifactLimits(BaseModel):
    """Limits that keep a bad or hostile source from filling the disk or hanging a worker.

    The defaults fit today's large vision and language models; an operator serving bigger
    ones raises them in the service's settings and passes them to the cache.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_download_bytes: int = Field(default=2 * GiB, gt=0)
    # Per network operation (connecting, and each read), as httpx counts it: a stalled
    # server is dropped, a slow but steady download of a large file is not.
    download_timeout_s: float = Field(default=30.0, gt=0)
    # Weights barely compress, so twice the download limit is room enough for honest archives
    # and a hard stop for a decompression bomb.
    max_extracted_bytes: int = Field(default=4 * GiB, gt=0)
    max_archive_members: int = Field(default=10_000, gt=0)
