"""``GET /v1/sweeps/{sweep_id}``: a sweep's loads as ``dlscope sweep`` labelled them, each
with its token figures, verdict and judgement against the bounds, the Pareto frontier and a
search's answer (``services.gateway.sweeps``)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, status

from services.gateway.context import GatewayContext, context_of
from services.gateway.schemas import NotFound
from services.gateway.sweeps import SweepView, read_sweep

__all__ = ["router"]

router = APIRouter(prefix="/v1/sweeps")
Context = Annotated[GatewayContext, Depends(context_of)]


@router.get("/{sweep_id}", response_model=SweepView, responses=NotFound)
async def get_sweep(sweep_id: uuid.UUID, context: Context) -> SweepView:
    """The sweep's loads in the order they ran; a load measured twice is listed twice, its
    first run ``superseded``."""
    sweep = await read_sweep(context.store, sweep_id)
    if sweep is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no sweep {sweep_id} (yet)")
    return sweep
