"""``python -m participant_sdk.conformance --bootstrap HOST:PORT --participant NAME --action ...``

Exit status: 0 when every case passed, 1 when one failed, 2 when the kit could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any, cast

from aiokafka.errors import KafkaError

from participant_sdk.conformance.cases import ActionSpec, CaseResult, KitConfig, run_cases
from participant_sdk.protocol import DEFAULT_TOPIC_PREFIX
from participant_sdk.version import version_line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m participant_sdk.conformance",
        description="Drive a running participant through the sagaflow wire contract.")
    p.add_argument("--version", action="version",
                   version=version_line("python -m participant_sdk.conformance"))
    p.add_argument("--bootstrap", default=os.environ.get("SAGAFLOW_KAFKA_BOOTSTRAP"),
                   help="Kafka bootstrap servers (default: $SAGAFLOW_KAFKA_BOOTSTRAP)")
    p.add_argument("--prefix", default=DEFAULT_TOPIC_PREFIX, help="topic prefix (default: saga)")
    p.add_argument("--participant", required=True, help="the participant's name")
    p.add_argument("--action", action="append", required=True, metavar="NAME[:tcc|saga]",
                   help="an action it handles, TCC (default) or saga step; repeatable")
    p.add_argument("--payload", action="append", default=[], metavar="NAME=JSON",
                   help="a payload the action accepts (default {}); repeatable")
    p.add_argument("--reply-topic", help="an existing topic for the replies, where the kit may "
                   "not create topics (default: a private topic, created and deleted)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a reply")
    p.add_argument("--startup-timeout", type=float, default=30.0,
                   help="seconds to wait for the first reply")
    return p


def _actions(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[ActionSpec, ...]:
    payloads: dict[str, dict[str, Any]] = {}
    for item in args.payload:
        name, sep, text = item.partition("=")
        try:
            value = json.loads(text) if sep else None
        except ValueError as exc:
            parser.error(f"--payload {name}: not JSON ({exc})")
        if not isinstance(value, dict):
            parser.error(f"--payload {item!r}: expected NAME=<a JSON object>")
        payloads[name] = value
    actions = []
    for item in args.action:
        name, _, kind = item.partition(":")
        if kind not in ("", "tcc", "saga") or not name:
            parser.error(f"--action {item!r}: expected NAME, NAME:tcc or NAME:saga")
        actions.append(ActionSpec(name, cast(Any, kind or "tcc"), payloads.pop(name, {})))
    if payloads:
        parser.error(f"--payload for an action not named by --action: {sorted(payloads)}")
    return tuple(actions)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.bootstrap:
        parser.error("--bootstrap is required (or set SAGAFLOW_KAFKA_BOOTSTRAP)")
    config = KitConfig(bootstrap=args.bootstrap, prefix=args.prefix,
                       participant=args.participant, actions=_actions(parser, args),
                       timeout=args.timeout, startup_timeout=args.startup_timeout,
                       reply_topic=args.reply_topic)

    def show(result: CaseResult) -> None:
        print(result.line(), flush=True)

    try:
        results = asyncio.run(run_cases(config, show))
    except (KafkaError, OSError) as exc:
        print(f"conformance: cannot use Kafka at {args.bootstrap}: {exc!r}", file=sys.stderr)
        return 2
    failed = sum(not r.passed for r in results)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
