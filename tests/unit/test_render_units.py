"""Grafana's units as the renderer prints them (axis ticks, stat values) and labels axes."""

from __future__ import annotations

import math

import pytest

from observability.render.units import format_value, unit_label


@pytest.mark.parametrize("value, unit, text", [
    (0, "bytes", "0 B"), (512, "bytes", "512 B"), (1536, "bytes", "1.5 KiB"), (3 * 1024 ** 3, "bytes", "3 GiB"),
    (2e9, "decbytes", "2 GB"), (1500, "Bps", "1.5 kB/s"), (2048, "binBps", "2 KiB/s"), (2, "kbytes", "2 KiB"),
    (8e6, "bps", "8 Mb/s"),
    (0.25, "s", "250 ms"), (1e-5, "s", "10 µs"), (90, "s", "1.5 min"), (7200, "s", "2 h"), (172800, "s", "2 day"),
    (1500, "ms", "1.5 s"), (0.5, "ms", "500 µs"), (0, "ms", "0 s"),
    (50, "percent", "50%"), (0.123, "percentunit", "12.3%"),
    (12.5, "reqps", "12.5 req/s"), (3000, "ops", "3 K ops/s"), (2, "mps", "2 msg/s"),
    (1234567, "short", "1.23 Mil"), (999, "short", "999"), (0.000123, "short", "0.000123"), (-2500, "short", "-2.5 K"),
    (1234567, "none", "1234567"), (1500, "sishort", "1.5 k"), (500, "sishort", "500"),
    (1_700_000_000_000, "dateTimeAsIso", "2023-11-14 22:13:20"), (5, "widgets", "5 widgets"), (7, "", "7"),
])
def test_format_value(value, unit, text):
    assert format_value(value, unit) == text


def test_decimals_are_honoured():
    assert format_value(1536, "bytes", decimals=0) == "2 KiB"
    assert format_value(12.345, "percent", decimals=1) == "12.3%"


def test_nan_and_infinity():
    assert format_value(math.nan, "bytes") == "NaN"
    assert format_value(math.inf, "s") == "+Inf"
    assert format_value(-math.inf, "short") == "-Inf"


@pytest.mark.parametrize("unit, label", [("bytes", "bytes"), ("decbytes", "bytes"), ("Bps", "bytes/s"),
                                         ("s", "duration"), ("ms", "duration"), ("percent", "percent"),
                                         ("percentunit", "percent"), ("short", ""), ("none", ""), ("", ""),
                                         ("reqps", "requests/s"), ("mps", "messages/s"), ("widgets", "widgets")])
def test_unit_label(unit, label):
    assert unit_label(unit) == label
