"""``pinlater``: the command-line entry point. Each subcommand lives in its own module."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from pinlater import __version__
from pinlater.cli import admin, bench, client, migrate_layout, prepare_mysql, serve, worker


class OneLineErrorParser(argparse.ArgumentParser):
    """Usage errors as one line naming the problem (``pinlater serve: unrecognized ...``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="pinlater",
        description="pinlater: a drop-in, Rust-accelerated successor to Pinterest's PinLater job queue.",
    )
    parser.add_argument("--version", action="version", version=f"pinlater {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    serve.add_parser(sub)
    worker.add_parser(sub)
    client.add_parser(sub)
    admin.add_parser(sub)
    bench.add_parser(sub)
    migrate_layout.add_parser(sub)
    prepare_mysql.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
