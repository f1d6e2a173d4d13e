"""The bench results as a plain-text table."""

from __future__ import annotations

from typing import Any

from bench.breakdown import SEGMENTS
from bench.latency import floor_ms
from bench.stack import KAFKA_BROKER


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
                     f"({hops['hops_measured']} commands)", _segments(hops)))
    return rows


def _segments(hops: dict[str, Any]) -> str:
    """``relay 1.0 / 2.0; ...``: p50 / p95 of each segment of a hop, then the whole hop."""
    return "; ".join(
        f"{k} {hops[k + '_ms']['p50']:.1f} / {hops[k + '_ms']['p95']:.1f}"
        for k in (*SEGMENTS, "hop"))


def _leg(saga: dict[str, Any], seg: str) -> str:
    """``p50 / p95 [floor, ratio]`` of one leg of the per-hop split at 1 in flight."""
    got = saga["one"]["hop_breakdown"][seg + "_ms"]
    text = f"{got['p50']:.2f} / {got['p95']:.2f}"
    floor = saga.get("leg_floors", {}).get("legs_ms", {}).get(seg)
    if floor:
        text += f" [{floor:.2f}, {got['p50'] / floor:.1f}x]"
    return text


def _floor_parts(floors: dict[str, Any]) -> str:
    k, pg = floors["kafka"], floors["postgres"]
    return (f"{k['one_way_ms']:.2f} / {k['ack_ms']:.2f}; {pg['begin_ms']:.2f} / "
            f"{pg['statement_ms']:.2f} / {pg['commit_ms']:.2f} ({pg['commit_unflushed_ms']:.2f})"
            f" / {pg['notify_ms']:.2f}; CPU µs one at a time: per round trip Postgres backend "
            f"{_f(pg.get('backend_cpu_us_per_round_trip'), 0)} + asyncpg client "
            f"{_f(pg.get('client_cpu_us_per_round_trip'), 0)}, per message Kafka broker "
            f"{_f(k.get('broker_cpu_us_per_message'), 0)} + aiokafka producer "
            f"{_f(k.get('producer_cpu_us_per_message'), 0)} + consumer "
            f"{_f(k.get('consumer_cpu_us_per_message'), 0)}"
            f" (load {floors['load_average'][0]:.1f})")


_SAGA_LABEL = {"bench_tcc3": "3-step TCC", "bench_steps3": "3 saga steps"}


def _noticed(run: dict[str, Any]) -> str:
    ms = run["noticed_ms"]
    return "-" if not ms["count"] else f"{ms['p50']:.2f} / {ms['p99']:.2f}"


def _latency_rows(latency: dict[str, Any], limits: dict[str, Any] | None
                  ) -> list[tuple[str, list[str]]]:
    """One row per figure, one column per variant (stack) of the latency phase."""
    names = list(latency)
    rows: list[tuple[str, list[str]]] = []

    def add(label: str, fn: Any) -> None:
        cells = []
        for name in names:
            try:
                cells.append(fn(latency[name]))
            except (KeyError, TypeError, ZeroDivisionError):
                cells.append("-")
        rows.append((label, cells))

    def lat(run: dict[str, Any], floor: float) -> str:
        ms = run["latency_ms"]
        return (f"{ms['p50']:.1f} / {ms['p99']:.1f} ({ms['p50'] / floor:.1f}x)"
                if floor == floor else f"{ms['p50']:.1f} / {ms['p99']:.1f}")

    first = latency[names[0]]
    for saga in first["sagas"]:
        label = _SAGA_LABEL.get(saga, saga)
        hops = first["sagas"][saga]["hops"]
        floor = floor_ms(limits, hops)
        rows.append((f"{label}: floor ms ({hops} hops x (Kafka RT + 2 commits))",
                     [f"{floor:.2f}"] * len(names)))
        add(f"{label}, 1 in flight: latency p50 / p99 ms (p50 / floor)",
            lambda r, s=saga, f=floor: lat(r["sagas"][s]["one"], f))
        add(f"{label}, 1 in flight: sagas/s", lambda r, s=saga: _f(r["sagas"][s]["one"]["rate"]))
        add(f"{label}, 1 / 16 in flight: end -> saga-end hint at the driver p50 / p99 ms",
            lambda r, s=saga: "{} ; {}".format(*(_noticed(r["sagas"][s][k])
                                                 for k in ("one", "sixteen"))))
        add(f"{label}, 1 in flight: commits per saga (coordinator)",
            lambda r, s=saga: "{:.1f} ({:.1f})".format(
                r["sagas"][s]["one"]["costs"]["pg_xacts_per_saga_total"],
                r["sagas"][s]["one"]["costs"]["pg_xacts_per_saga"]["coordinator"]))
        for seg in (*SEGMENTS, "hop"):
            add(f"{label}, 1 in flight: {seg.replace('_', ' ')} p50 / p95 ms per hop"
                " [floor, p50 / floor]",
                lambda r, s=saga, g=seg: _leg(r["sagas"][s], g))
        add(f"{label}, 1 in flight: split at the commits p50 ms: coordinator txn + pick up"
            " (= relay); participant commit + reply send (= participant txn)",
            lambda r, s=saga: "{coordinator_txn:.2f} + {pick_up:.2f}; {participant_commit:.2f}"
            " + {reply_send:.2f} [floors {f[coordinator_txn]:.2f} + {f[pick_up]:.2f};"
            " {f[participant_commit]:.2f} + {f[reply_send]:.2f}]".format(
                f=r["sagas"][s]["leg_floors"]["legs_ms"], **{k: v["p50"] for k, v in r[
                    "sagas"][s]["one"]["hop_breakdown"]["commit_split_ms"].items()}))
        add(f"{label}: floors: Kafka one way / ack; Postgres BEGIN / statement / COMMIT"
            " (unflushed) / NOTIFY ms; bare CPU",
            lambda r, s=saga: _floor_parts(r["sagas"][s]["leg_floors"]))
        add(f"{label}, 1 in flight: one saga's timeline (ms from its start)",
            lambda r, s=saga: r["sagas"][s]["one"]["hop_breakdown"]["timeline"])
        add(f"{label}, 16 in flight: sagas/s",
            lambda r, s=saga: _f(r["sagas"][s]["sixteen"]["rate"]))
        add(f"{label}, 16 in flight: latency p50 / p99 ms",
            lambda r, s=saga: lat(r["sagas"][s]["sixteen"], float("nan")))
        add(f"{label}, 16 in flight: stack CPU ms per saga (+ Kafka broker) (+ driver)",
            lambda r, s=saga: "{:.2f} (+{}) (+{:.2f})".format(
                r["sagas"][s]["sixteen"]["stack_cpu_ms_per_saga"],
                _f(r["sagas"][s]["sixteen"]["costs"]["cpu_ms_per_saga"].get(
                    KAFKA_BROKER, float("nan"))),
                r["sagas"][s]["sixteen"]["costs"]["cpu_ms_per_saga"]["bench driver (API + polls)"]))
        add(f"{label}, 16 in flight: CPU ms per saga per process",
            lambda r, s=saga: _per_process(r["sagas"][s]["sixteen"]["costs"]))
        add(f"{label}, 16 in flight: commits per saga",
            lambda r, s=saga: f"{r['sagas'][s]['sixteen']['costs']['pg_xacts_per_saga_total']:.1f}")
        for which in ("one", "sixteen"):
            add(f"{label}, {_WHICH[which]}: database round trips per saga, per database",
                lambda r, s=saga, w=which: _round_trips(r["sagas"][s][w]["costs"]))
        add(f"{label}, 16 in flight: Postgres backend CPU µs per round trip",
            lambda r, s=saga: _backend_per_round_trip(r["sagas"][s]["sixteen"]["costs"]))
        add(f"{label}, 16 in flight: CPU floor ms per saga (round trips x bare backend µs +"
            " the broker's CPU)", lambda r, s=saga: _cpu_floor(r["sagas"][s]))
        for key in first["sagas"][saga]:
            if key.startswith("open_"):
                add(f"{label}, open loop {key[5:]}/s: latency p50 / p99 ms (p50 / floor)",
                    lambda r, s=saga, k=key, f=floor: lat(r["sagas"][s][k], f))
                add(f"{label}, open loop {key[5:]}/s: hop p50 / p95 ms",
                    lambda r, s=saga, k=key: "{:.2f} / {:.2f}".format(
                        r["sagas"][s][k]["hop_breakdown"]["hop_ms"]["p50"],
                        r["sagas"][s][k]["hop_breakdown"]["hop_ms"]["p95"]))
        add(f"{label}: load average during 1 / 16 in flight",
            lambda r, s=saga: "{:.1f} / {:.1f}".format(
                r["sagas"][s]["one"]["load_average"][0],
                r["sagas"][s]["sixteen"]["load_average"][0]))
    add("idle stack: database round trips/s (every statement, all databases)",
        lambda r: "n/a (pg_stat_statements not loaded)"
        if r["idle"].get("db_round_trips_per_s_total") is None
        else f"{r['idle']['db_round_trips_per_s_total']:.2f}")
    add("idle stack: database transactions/s (all databases)",
        lambda r: f"{r['idle']['db_transactions_per_s_total']:.2f}")
    add("idle stack: transactions/s per database", lambda r: ", ".join(
        f"{k} {v:.2f}" for k, v in r["idle"]["db_transactions_per_s"].items()))
    add("idle stack: wake-ups/s per process", lambda r: ", ".join(
        f"{k} {v:.0f}" for k, v in r["idle"]["wakeups_per_s"].items()))
    add("idle stack: CPU ms/s (processes + Postgres backends)", lambda r: "{:.1f} + {:.1f}".format(
        sum(r["idle"]["cpu_ms_per_s"].values()), r["idle"]["postgres_backends_cpu_ms_per_s"]))
    add("JSON per snapshot, loads + dumps µs: json / orjson / msgspec", lambda r: " / ".join(
        "{:.1f}".format(r["codec"][c]["snapshot_loads_us"] + r["codec"][c]["snapshot_dumps_us"])
        if c in r["codec"] else "-" for c in ("json", "orjson", "msgspec")))
    add("reply envelope validate + dump µs (pydantic)", lambda r: "{:.1f}".format(
        r["codec"]["pydantic"]["reply_validate_json_us"]
        + r["codec"]["pydantic"]["reply_dump_json_us"]))
    return rows


_WHICH = {"one": "1 in flight", "sixteen": "16 in flight"}


def _per_process(costs: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in costs["cpu_ms_per_saga"].items() if v >= 0.05)


def _round_trips(costs: dict[str, Any]) -> str:
    trips = costs["pg_round_trips_per_saga"]
    if not trips:
        return "n/a (pg_stat_statements not loaded)"
    return f"{sum(trips.values()):.1f} (" + ", ".join(
        f"{k} {v:.1f}" for k, v in trips.items()) + ")"


def _backend_per_round_trip(costs: dict[str, Any]) -> str:
    trips = sum(costs["pg_round_trips_per_saga"].values())
    return f"{costs['cpu_ms_per_saga']['postgres (stack backends)'] * 1000 / trips:.0f}"


def _cpu_floor(saga: dict[str, Any]) -> str:
    """The CPU this saga costs before any of our Python runs: its round trips at what a bare
    client's cost the server, and the broker's CPU as spent (batched as the stack batches:
    less per message than one at a time, so the bare figure would overstate it)."""
    costs, floors = saga["sixteen"]["costs"], saga["leg_floors"]
    trips = sum(costs["pg_round_trips_per_saga"].values())
    pg_us = floors["postgres"]["backend_cpu_us_per_round_trip"]
    broker = costs["cpu_ms_per_saga"].get(KAFKA_BROKER, 0.0)
    return f"{trips:.1f} x {pg_us:.0f} µs + {broker:.2f} = {trips * pg_us / 1000 + broker:.2f}"


def _render_columns(names: list[str], rows: list[tuple[str, list[str]]]) -> str:
    header = ("figure", names)
    width = max(len(k) for k, _ in [header, *rows])
    cols = [max(len(n), *(len(c[i]) for _, c in rows)) for i, n in enumerate(names)]
    lines = []
    for label, cells in [header, *rows]:
        lines.append(f"{label:<{width}}  " + "  ".join(
            f"{c:<{w}}" for c, w in zip(cells, cols, strict=True)))
    return "\n".join(lines)


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
            ("limit: one 1-row INSERT commit alone p50 / p95 ms",
             " / ".join(_f(pg.get("commit_ms", {}).get(q, float("nan")), 2)
                        for q in ("p50", "p95"))),
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
    text = "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
    latency = results.get("latency")
    if latency:
        targets = "\n".join(
            f"targets ({name}): " + ", ".join(f"{k}={v}" for k, v in run["targets"].items())
            for name, run in latency.items() if run.get("targets"))
        text = (_render_columns(list(latency), _latency_rows(latency, limits)) + "\n"
                + targets + "\n\n" + text)
    return text
