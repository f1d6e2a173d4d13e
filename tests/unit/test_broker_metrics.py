"""The JMX reader's output parsed into the broker's counters, and a window's difference."""

from __future__ import annotations

import pytest

from bench.broker_metrics import BrokerCounts, parse

OUT = ("requests\tFetch\t12\nrequests\tFetchConsumer\t10\nrequests\tProduce\t7\n"
       "messages_in\t20\nbytes_in\t2048\n")


def test_parse_reads_every_request_type_and_the_message_totals() -> None:
    counts = parse(OUT)
    assert counts.requests == {"Fetch": 12, "FetchConsumer": 10, "Produce": 7}
    assert (counts.messages_in, counts.bytes_in) == (20, 2048)


def test_a_window_is_the_difference_and_its_cost_is_per_message_produced() -> None:
    before = parse(OUT)
    after = BrokerCounts({"Fetch": 16, "FetchConsumer": 14, "Produce": 9, "Heartbeat": 2},
                         messages_in=28, bytes_in=4096)
    window = after.minus(before)
    assert window.requests == {"Fetch": 4, "FetchConsumer": 4, "Produce": 2, "Heartbeat": 2}
    assert window.messages_in == 8
    assert window.per_message() == {"Fetch": 0.5, "FetchConsumer": 0.5, "Heartbeat": 0.25,
                                    "Produce": 0.25}
    assert BrokerCounts({"Produce": 1}).per_message() == {}  # nothing produced: no ratio


def test_unexpected_output_is_refused_not_read_as_zero() -> None:
    with pytest.raises(ValueError, match="unexpected line"):
        parse("Exception in thread main\n")
