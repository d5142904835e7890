"""A service's HTTP server that cannot listen says which setting to change, not a traceback."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette

from shared.errors import ConfigurationError
from shared.serving import InProcessServer


async def test_an_address_in_use_is_refused_naming_the_setting() -> None:
    first = InProcessServer(
        Starlette(), host="127.0.0.1", port=0, name="artifact server", setting="X_URL"
    )
    await first.start()
    try:
        second = InProcessServer(
            Starlette(), host="127.0.0.1", port=first.port, name="artifact server", setting="X_URL"
        )
        with pytest.raises(
            ConfigurationError, match=rf"could not listen on 127.0.0.1:{first.port} \(X_URL\)"
        ):
            await second.start()
    finally:
        await first.stop()
