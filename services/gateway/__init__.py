"""Gateway: the HTTP API."""

from services.gateway.app import GatewayContext, create_app
from services.gateway.service import GatewayService

__all__ = ["GatewayContext", "GatewayService", "create_app"]
