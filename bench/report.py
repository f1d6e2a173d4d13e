"""The bench results as a plain-text table."""

from __future__ import annotations

from typing import Any


def _f(value: Any, digits: int = 1) -> str:
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _closed_rows(label: str, run: dict[str, Any]) -> list[tuple[str, str]]:
    costs = run["costs"]
    return [
        (f"{label}: sustained sagas/s ({run['window_s']:.0f} s window, "
         f"{run['concurrency']} in flight)", _f(run["rate"])),
        (f"{label}: outcomes", ", ".join(f"{k} {v}" for k, v in sorted(run["statuses"].items()))),
        (f"{label}: Postgres commits per saga",
         _f(costs["pg_xacts_per_saga_total"], 2) + "  (" + ", ".join(
             f"{k} {v:.2f}" for k, v in costs["pg_xacts_per_saga"].items()) + ")"),
        (f"{label}: Kafka messages per saga",
         f"{costs['kafka_per_saga']['total']:.2f}  (commands "
         f"{costs['kafka_per_saga']['commands']:.2f}, replies "
         f"{costs['kafka_per_saga']['replies']:.2f})"),
        (f"{label}: CPU ms per saga",
         ", ".join(f"{k} {v:.2f}" for k, v in costs["cpu_ms_per_saga"].items())),
        (f"{label}: CPU cores busy",
         ", ".join(f"{k} {v:.2f}" for k, v in costs["cpu_cores"].items())),
        (f"{label}: share of time runnable but waiting for a CPU",
         ", ".join(f"{k} {v:.2f}" for k, v in costs.get("runqueue_wait_fraction", {}).items())),
    ]


def _open_rows(op: dict[str, Any]) -> list[tuple[str, str]]:
    lat = op["latency_ms"]
    rows = [
        (f"3-step e2e: latency p50 / p95 / p99 / max ms at {op['target_rate']:.0f}/s "
         f"open loop ({op['sagas']} sagas)",
         " / ".join(_f(lat[q]) for q in ("p50", "p95", "p99", "max"))),
        (f"3-step e2e: outcomes at {op['target_rate']:.0f}/s",
         ", ".join(f"{k} {v}" for k, v in sorted(op["statuses"].items()))),
    ]
    hops = op.get("hop_breakdown")
    if hops:
        rows.append((f"3-step e2e: per hop p50 / p95 ms at {op['target_rate']:.0f}/s "
                     f"({hops['hops_per_saga']:.1f} hops per saga)", "; ".join(
                         f"{k.removesuffix('_ms')} {hops[k]['p50']:.1f} / {hops[k]['p95']:.1f}"
                         for k in ("relay_ms", "participant_ms", "coordinator_ms"))))
    return rows


def render_table(results: dict[str, Any]) -> str:
    rows: list[tuple[str, str]] = []
    limits = results.get("limits")
    if limits:
        pg, kafka = limits["postgres"], limits["kafka"]
        rows += [
            (f"limit: Postgres 1-row insert txns/s (asyncpg, {pg['concurrency']} conns, "
             f"{pg['seconds']:.0f} s)", _f(pg["rate"])),
            ("limit: same, pool.acquire() + BEGIN/COMMIT per txn (asyncpg default reset)",
             _f(pg.get("pool_acquire_per_txn_rate", float("nan")))),
            (f"limit: Kafka produce->consume msgs/s (aiokafka, acks=all, "
             f"{kafka['stream_seconds']:.0f} s)", _f(kafka["stream_rate"])),
            ("limit: Kafka one-message produce->consume round trip p50 / p95 / p99 ms",
             " / ".join(_f(kafka["round_trip_ms"][q], 2) for q in ("p50", "p95", "p99"))),
        ]
    e2e = results.get("e2e")
    if e2e:
        rows += _closed_rows("3-step e2e", e2e["closed_loop"])
        for op in (e2e["open_loop"], e2e.get("open_loop_extra")):
            if op is not None:
                rows += _open_rows(op)
    ratios = results.get("ratios")
    if ratios:
        rows += [
            ("saga rate / Postgres write-txn rate", _f(ratios["saga_rate_over_pg_write_rate"], 3)),
            ("saga rate / Kafka message rate", _f(ratios["saga_rate_over_kafka_stream_rate"], 4)),
            ("stack's commit rate / Postgres write-txn rate",
             _f(ratios["pg_xact_rate_of_stack_over_pg_write_rate"], 2)),
            ("stack's message rate / Kafka message rate",
             _f(ratios["kafka_message_rate_of_stack_over_kafka_stream_rate"], 3)),
            ("ceiling if Postgres commits were the only cost, sagas/s",
             _f(ratios["ceiling_by_pg_sagas_per_s"])),
            ("ceiling if Kafka messages were the only cost, sagas/s",
             _f(ratios["ceiling_by_kafka_sagas_per_s"])),
        ]
    for steps, run in results.get("scale_steps", {}).items():
        rows += _closed_rows(f"scale {steps} TCC step(s)", run)[:4]
    rep = results.get("replicas")
    if rep:
        rows += _closed_rows("3-step, 2 coordinators + 2 relays", rep)
    mem = results.get("coordinator_memory")
    if mem:
        rows += [
            (f"coordinator RSS MB before / after / peak, {mem['sagas']:,} sagas waiting",
             f"{mem['rss_before_mb']:.1f} / {mem['rss_after_mb']:.1f} / "
             f"{mem['rss_peak_mb']:.1f}"),
            ("waiting sagas in DB (running)", str(mem["running_in_db"])),
        ]
    targets = results.get("targets")
    if targets:
        rows.append(("targets", ", ".join(f"{k}={v}" for k, v in targets.items())))
    width = max(len(k) for k, _ in rows) if rows else 0
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
