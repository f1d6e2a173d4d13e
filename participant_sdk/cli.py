"""``sagaflow-barrier`` (``python -m participant_sdk``): a participant database's barrier and
dead-letter tables: install them, purge old barrier rows."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from datetime import timedelta

import asyncpg

from participant_sdk.barrier import install_barrier, purge_barrier
from participant_sdk.dead_letters import install_dead_letters
from participant_sdk.durations import parse_duration
from participant_sdk.startup_errors import SettingsError, run_cli
from participant_sdk.version import version_line


def _age(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sagaflow-barrier", description=__doc__)
    parser.add_argument("--version", action="version", version=version_line("sagaflow-barrier"))
    sub = parser.add_subparsers(dest="command", required=True)
    dsn_help = "participant database URL (default: $SAGAFLOW_PARTICIPANT_DSN)"
    install = sub.add_parser("install-barrier", help="create the barrier and dead-letter tables")
    install.add_argument("--dsn", default=os.environ.get("SAGAFLOW_PARTICIPANT_DSN"), help=dsn_help)
    purge = sub.add_parser("purge-barrier", help="delete barrier rows older than an age")
    purge.add_argument("--dsn", default=os.environ.get("SAGAFLOW_PARTICIPANT_DSN"), help=dsn_help)
    purge.add_argument(
        "--older-than", type=_age, required=True, help="age such as 7d, 12h, 30m or seconds"
    )
    args = parser.parse_args(argv)

    def body() -> int:
        if not args.dsn:
            raise SettingsError("SAGAFLOW_PARTICIPANT_DSN is not set (or pass --dsn): the "
                                "participant's Postgres database")
        return asyncio.run(_run(args))

    return run_cli(body, prog="sagaflow-barrier", postgres_var="--dsn / SAGAFLOW_PARTICIPANT_DSN")


async def _run(args: argparse.Namespace) -> int:
    conn = await asyncpg.connect(args.dsn, timeout=10)
    try:
        if args.command == "install-barrier":
            await install_barrier(conn)
            await install_dead_letters(conn)
            print("barrier and dead-letter tables installed")
        else:
            deleted = await purge_barrier(conn, args.older_than)
            print(f"deleted {deleted} barrier rows older than {args.older_than}")
    finally:
        await conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
