"""``dlscope up`` (every service in this process, behind the HTTP gateway) and ``dlscope
serve NAME`` (one service of a deployment, on its broker and database)."""

from __future__ import annotations

import asyncio
import importlib
import logging
import signal
from typing import Annotated, cast

import typer

from dlscope.catalogue import SERVICES, main_module
from dlscope.cli.options import EndpointOpt, run_settings
from dlscope.cli.terminal import LOG_FORMAT, console, fail
from dlscope.cli.zoo_build import FAMILIES, build_on_first_use
from shared.config import Settings
from shared.manifests.model import SERVED_BY
from shared.messages import FRAMEWORKS, Framework, Hardware

__all__ = ["frameworks_to_serve", "serve", "up"]

log = logging.getLogger(__name__)


def up(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8080,
    framework: Annotated[
        str,
        typer.Option(
            "--framework",
            "-f",
            help="the workers to start: frameworks separated by commas, or 'all' (every one "
            "installed here)",
        ),
    ] = "onnxruntime",
    zoo: Annotated[
        str | None,
        typer.Option(
            "--zoo",
            help="build and register these families of the zoo first where they are not built "
            f"here yet (no download): {', '.join(FAMILIES)}, separated by commas, or all",
        ),
    ] = None,
    endpoint: EndpointOpt = None,
) -> None:
    """Serve the HTTP gateway and every service in this process (in-memory broker, SQLite)."""
    import uvloop

    from dlscope.embedded import embedded_settings, installed, serve_all

    families = _families(zoo)
    configured = run_settings(endpoint)
    if families:
        # The language models are built here, not on each request: their first build takes a
        # minute or more, which no HTTP request should wait for.
        from dlscope.cli.embedded_client import EmbeddedClient

        client = EmbeddedClient(configured)
        for family in families:
            build_on_first_use(family, client.settings.home, client)
    settings = embedded_settings(configured)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    wanted = frameworks_to_serve(framework, settings)
    unknown = [f for f in wanted if f not in FRAMEWORKS]
    if unknown:
        raise fail(f"unknown framework {unknown[0]!r}; choose from {', '.join(FRAMEWORKS)}", 2)
    missing = {f: why for f in wanted if (why := installed(f))}
    if framework != "all" and missing:
        raise fail("; ".join(missing.values()), 2)
    workers: list[tuple[Framework, Hardware]] = [
        (cast(Framework, f), "cpu") for f in wanted if f not in missing
    ]

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        names = ", ".join(f for f, _ in workers)
        console.print(f"dlscope up: http://{host}:{port}/docs, workers: {names} (Ctrl-C stops)")
        await serve_all(settings, host=host, port=port, stop=stop, workers=workers)

    uvloop.run(main())


def frameworks_to_serve(framework: str, settings: Settings) -> tuple[str, ...]:
    """The frameworks ``--framework`` names. ``all`` is every framework that runs here on its
    own: the endpoint worker measures a server the user names, so without one (--endpoint,
    DLSCOPE_ENDPOINT_URL) it is left out, saying how to add it, rather than started to fail."""
    if framework != "all":
        return tuple(framework.split(","))
    if settings.endpoint_url:
        return FRAMEWORKS
    log.info(
        "%s worker not started: it measures a server you name; add one with --endpoint URL "
        "(an OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1)",
        SERVED_BY,
    )
    return tuple(f for f in FRAMEWORKS if f != SERVED_BY)


def _families(zoo: str | None) -> tuple[str, ...]:
    """The zoo's families ``--zoo`` names; refused naming the ones that are not."""
    if zoo is None:
        return ()
    if zoo.strip() == "all":
        return tuple(FAMILIES)
    named = tuple(dict.fromkeys(part.strip() for part in zoo.split(",") if part.strip()))
    unknown = [name for name in named if name not in FAMILIES]
    if unknown or not named:
        shown = ", ".join(repr(name) for name in unknown) or repr(zoo)
        raise fail(f"--zoo: no family {shown}; choose from {', '.join(FAMILIES)}, or all", 2)
    return named


def serve(
    service: Annotated[str, typer.Argument(help=f"one of {', '.join(SERVICES)}")],
    host: Annotated[str, typer.Option(help="gateway only")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="gateway only")] = 8080,
    framework: Annotated[str, typer.Option(help="worker only")] = "onnxruntime",
    hardware: Annotated[str, typer.Option(help="worker only")] = "cpu",
    agent_id: Annotated[str | None, typer.Option(help="worker only")] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(help="endpoint worker only: the server's OpenAI-compatible API root"),
    ] = None,
    partition: Annotated[
        int, typer.Option(help="recorder only: 0-based, of DLSCOPE_RECORDER_PARTITIONS")
    ] = 0,
) -> None:
    """Run one service against the configured broker and database (DLSCOPE_BROKER_URL, …)."""
    if service not in SERVICES:
        raise fail(f"unknown service {service!r}; choose one of: {', '.join(SERVICES)}", 2)
    # Each service's own command line, as `python -m services.<name>` takes it.
    argv = {
        "gateway": ["--host", host, "--port", str(port)],
        "worker": ["--framework", framework, "--hardware", hardware]
        + (["--agent-id", agent_id] if agent_id else [])
        + (["--endpoint", endpoint] if endpoint else []),
        "recorder": ["--partition", str(partition)],
    }.get(service, [])
    importlib.import_module(main_module(service)).main(argv)
