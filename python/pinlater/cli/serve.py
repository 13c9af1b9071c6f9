"""``pinlater serve``: run the PinLater Thrift server.

Settings come from the defaults, then a properties file (the original's keys), then flags:
a flag always wins. A bad flag or file ends the command with a one-line error (exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from pinlater import eventloop
from pinlater.config import BACKENDS, Settings, SettingsLayer, directory, load_properties, processes, resolve_settings
from pinlater.errors import ConfigError, StoreLockedError
from pinlater.logs import FORMATS, setup_logging

log = logging.getLogger("pinlater")

EPILOG = """\
examples:
  pinlater serve                                  embedded store in ./pinlater-data, port 9010
  pinlater serve --host 0.0.0.0                   serve other machines too
  pinlater serve --properties pinlater.properties the original's properties file
  pinlater serve --backend redis --backend-config redis.json
  pinlater serve --backend redis --backend-config redis.json --processes auto   one process per core
"""


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "serve",
        help="run the PinLater server",
        description="Serve the PinLater Thrift interface (framed transport, binary protocol) "
        "and the admin HTTP port (dashboard at /, /stats.txt, /stats.json, /metrics, /healthz, /readyz).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", help="address to serve Thrift on (default 127.0.0.1; 0.0.0.0 for all)")
    p.add_argument("--port", type=int, help="Thrift port (default 9010; THRIFT_PORT); 0 picks a free port")
    p.add_argument("--admin-host", help="address of the admin HTTP server (default 127.0.0.1)")
    p.add_argument("--admin-port", type=int, help="admin HTTP port (default 9999; OSTRICH_PORT)")
    p.add_argument(
        "--data-dir", type=directory, help="embedded store directory (default ./pinlater-data; EMBEDDED_DATA_DIR)"
    )
    p.add_argument("--properties", type=Path, metavar="FILE", help="a properties file with the original's keys")
    p.add_argument("--backend", choices=BACKENDS, help="storage backend (default embedded; PINLATER_BACKEND)")
    p.add_argument(
        "--backend-config", type=Path, metavar="FILE", help="the backend's JSON shard config (redis or mysql)"
    )
    p.add_argument("--num-priorities", type=int, help="priority levels (default 3; NUM_PRIORITY_LEVELS)")
    p.add_argument("--max-frame-bytes", type=int, help="largest accepted Thrift frame (default 16 MiB)")
    p.add_argument(
        "--processes",
        type=_processes,
        metavar="N|auto",
        help="server processes sharing the Thrift port (default 1; auto: one per usable core; "
        "not with the embedded backend; SERVER_PROCESSES)",
    )
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log level")
    p.add_argument(
        "--log-format", default="text", choices=FORMATS, help="log lines as text (default) or JSON lines, one per event"
    )
    p.set_defaults(run=run)


#: Flag -> the Settings attribute it sets.
FLAG_ATTRS = {
    "--host": "host",
    "--port": "port",
    "--admin-host": "admin_host",
    "--admin-port": "admin_port",
    "--data-dir": "data_dir",
    "--backend": "backend",
    "--backend-config": "backend_config_path",
    "--num-priorities": "num_priority_levels",
    "--max-frame-bytes": "max_frame_bytes",
    "--processes": "server_processes",
}


def _processes(text: str) -> int:
    try:
        return processes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, not {text!r}") from None


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Defaults, then the properties file, then the flags given (a flag wins), validated once."""
    layers = [load_properties(args.properties)] if args.properties else []
    given = {flag: getattr(args, flag[2:].replace("-", "_")) for flag in FLAG_ATTRS}
    given = {flag: value for flag, value in given.items() if value is not None}
    layers.append(
        SettingsLayer(
            {FLAG_ATTRS[flag]: value for flag, value in given.items()},
            {FLAG_ATTRS[flag]: f"{flag} {value}" for flag, value in given.items()},
        )
    )
    return resolve_settings(*layers)


def run(args: argparse.Namespace) -> int:
    from pinlater.server.processes import ChildStartError

    setup_logging(args.log_level, args.log_format, sys.stderr)
    try:
        settings = settings_from_args(args)
        return eventloop.run(_serve(settings, args.log_level, args.log_format), settings.event_loop)
    except (ConfigError, StoreLockedError, ChildStartError) as exc:
        print(f"pinlater serve: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"pinlater serve: {exc}", file=sys.stderr)
        return 2


async def _serve(settings: Settings, log_level: str = "INFO", log_format: str = "text") -> int:
    from pinlater.server.app import PinLaterServer
    from pinlater.server.processes import Supervisor, settings_for_children

    server = PinLaterServer(settings)
    supervisor: Supervisor | None = None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server.request_stop = stop.set  # (the admin port's shutdown, as the original's Ostrich had it)
    try:
        addresses = await server.start()
        if settings.server_processes > 1:
            children = settings_for_children(settings, addresses.thrift[1])
            supervisor = Supervisor(children, server.metrics, log_level, log_format)
            await supervisor.start()
    except BaseException:
        if supervisor is not None:
            await supervisor.stop(0)
        await server.stop(0)
        raise
    where = f"data dir {settings.data_dir}" if settings.backend == "embedded" else str(settings.backend_config_path)
    thrift_host, thrift_port = addresses.thrift
    admin_host, admin_port = addresses.admin
    log.info(
        "serving PinLater on %s:%d (admin http://%s:%d/), backend %s, %s, %d server process%s (pids %s), %s",
        thrift_host,
        thrift_port,
        admin_host,
        admin_port,
        settings.backend,
        where,
        settings.server_processes,
        "es" if settings.server_processes > 1 else "",
        " ".join(map(str, [os.getpid(), *(supervisor.pids() if supervisor else [])])),
        eventloop.loop_name(loop),
    )
    # What start-up made (modules, settings, pools, the server itself) lives as long as the
    # process: frozen, a full collection no longer walks it. In the Redis lifecycle bench such a
    # collection stalled every request for 29-39 ms, eight times in 15 s; frozen, 0.8-1.6 ms.
    gc.freeze()
    await stop.wait()
    log.info("signal received: stopping")
    if supervisor is not None:
        await asyncio.gather(server.stop(), supervisor.stop())
    else:
        await server.stop()
    return 0
