"""``pinlater prepare-mysql``: make the MySQL tables the original server wrote ready for ours.

Our server keeps a job's expiry in an ``expire_at`` column of each jobs table, beside tables of
its own per queue (``expiring``, ``expired_count``). A table the original made lacks the column,
and the server adds it at the table's first use: instant on MySQL 8.0.12+ and MariaDB 10.3+,
but a copy of the table on older MySQL, minutes on a big one, during which the statements that
need the table wait. This command does it ahead of the switch, each table in turn (logged as it
starts and ends), while the original servers still run: their statements name their columns and
never see the new one. Run again, it finds nothing left to do. Exit 0 when done, 2 for a bad
flag or config, 1 when a shard fails (the others are still done).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from pinlater.config import SettingsLayer, load_properties, resolve_settings
from pinlater.config_files import read_config_text
from pinlater.errors import ConfigError

PROG = "pinlater prepare-mysql"

EPILOG = """\
examples:
  pinlater prepare-mysql --backend-config mysql.prod.json
  pinlater prepare-mysql --properties pinlater.mysql.prod.properties --backend-config mysql.prod.json --shard 3
"""


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "prepare-mysql",
        help="add our expire_at column to the MySQL tables the original made, ahead of the switch",
        description="Give every jobs table of the MySQL shards that lacks it the expire_at column (and each "
        "queue the tables of ours it needs), which the server would otherwise add at the table's first use.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--backend-config", type=Path, metavar="FILE", required=True, help="the MySQL JSON shard config")
    p.add_argument(
        "--properties",
        type=Path,
        metavar="FILE",
        help="the properties file the servers run with (for MYSQL_NUM_DB_PER_QUEUE and the shard name prefix)",
    )
    p.add_argument("--shard", metavar="NAME", action="append", help="only this shard (repeat for several)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pinlater.backends.mysql import expiry
    from pinlater.backends.mysql.config import MySQLDriver, MySQLShardConfig

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    try:
        layers = [load_properties(args.properties)] if args.properties else []
        flags = {"backend": "mysql", "backend_config_path": args.backend_config}
        layers.append(SettingsLayer(flags, {"backend": "--backend mysql", "backend_config_path": "--backend-config"}))
        settings = resolve_settings(*layers)
        driver = MySQLDriver.from_settings(settings)
        shards = driver.parse_config(read_config_text(args.backend_config, "backend config"), str(args.backend_config))
        unknown = sorted(set(args.shard or ()) - set(shards))
        if unknown:
            raise ConfigError(f"{args.backend_config} has no shard {', '.join(unknown)}")
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    failed = 0
    for name, config in sorted(shards.items()):
        if args.shard and name not in args.shard:
            continue
        assert isinstance(config, MySQLShardConfig)
        store = driver.open_store(name, config, settings)
        try:
            altered = expiry.migrate(store, None, seconds=None)  # (a big table's copy takes what it takes)
        except Exception as exc:
            failed += 1
            print(f"{PROG}: shard {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        finally:
            store.close()
        print(f"shard {name}: {altered} table(s) given expire_at", flush=True)
    return 1 if failed else 0
