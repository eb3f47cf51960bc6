"""Grafana's units, as text: a value with its unit (``1.5 MiB``, ``250 ms``, ``12 req/s``) and an axis label.

A panel's ``unit`` is one of Grafana's unit ids (``fieldConfig.defaults.unit``). The common ones are known
here: data sizes (``bytes`` in powers of 1024, ``decbytes`` in powers of 1000, ``bits``, ``kbytes``, ...),
data rates (``Bps``, ``binBps``, ``bps``), durations (``ns`` ... ``d``), percentages (``percent`` 0..100,
``percentunit`` 0..1), rates of things (``reqps``, ``ops``, ``mps``, ``cps``, ...), ``short`` (K, Mil, Bil)
and ``none``. An id not known is shown after a ``short`` number, so nothing is hidden. Pure functions.
"""

from __future__ import annotations

import datetime
import math
from typing import NamedTuple, Optional

_SI = ("", " k", " M", " G", " T", " P", " E")
_IEC = ("", " Ki", " Mi", " Gi", " Ti", " Pi", " Ei")
_SHORT = ("", " K", " Mil", " Bil", " Tri", " Quadr", " Quint")


class _Unit(NamedTuple):
    kind: str  # "si", "iec", "short", "time", "percent", "datetime", "none"
    factor: float  # to the base unit (kbytes: 1024 bytes; ms: 0.001 s; percentunit: 100 %)
    suffix: str  # after the prefix: "B", "b/s", " req/s"
    label: str  # the axis label


def _data(prefixes: str, factor: float, suffix: str, label: str) -> _Unit:
    return _Unit(prefixes, factor, suffix, label)


_UNITS: dict[str, _Unit] = {
    "bytes": _data("iec", 1, "B", "bytes"), "decbytes": _data("si", 1, "B", "bytes"),
    "kbytes": _data("iec", 1024, "B", "bytes"), "mbytes": _data("iec", 1024 ** 2, "B", "bytes"),
    "gbytes": _data("iec", 1024 ** 3, "B", "bytes"), "deckbytes": _data("si", 1e3, "B", "bytes"),
    "decmbytes": _data("si", 1e6, "B", "bytes"), "decgbytes": _data("si", 1e9, "B", "bytes"),
    "bits": _data("iec", 1, "b", "bits"), "decbits": _data("si", 1, "b", "bits"),
    "Bps": _data("si", 1, "B/s", "bytes/s"), "binBps": _data("iec", 1, "B/s", "bytes/s"),
    "KBs": _data("si", 1e3, "B/s", "bytes/s"), "MBs": _data("si", 1e6, "B/s", "bytes/s"),
    "KiBs": _data("iec", 1024, "B/s", "bytes/s"), "MiBs": _data("iec", 1024 ** 2, "B/s", "bytes/s"),
    "bps": _data("si", 1, "b/s", "bits/s"), "binbps": _data("iec", 1, "b/s", "bits/s"),
    "ns": _Unit("time", 1e-9, "", "duration"), "µs": _Unit("time", 1e-6, "", "duration"),
    "us": _Unit("time", 1e-6, "", "duration"), "ms": _Unit("time", 1e-3, "", "duration"),
    "s": _Unit("time", 1, "", "duration"), "m": _Unit("time", 60, "", "duration"),
    "h": _Unit("time", 3600, "", "duration"), "d": _Unit("time", 86400, "", "duration"),
    "dtdurations": _Unit("time", 1, "", "duration"), "dtdurationms": _Unit("time", 1e-3, "", "duration"),
    "percent": _Unit("percent", 1, "%", "percent"), "percentunit": _Unit("percent", 100, "%", "percent"),
    "sishort": _Unit("si", 1, "", ""), "locale": _Unit("none", 1, "", ""),
    "dateTimeAsIso": _Unit("datetime", 1e-3, "", "time"), "dateTimeAsSystem": _Unit("datetime", 1e-3, "", "time"),
    "short": _Unit("short", 1, "", ""), "none": _Unit("none", 1, "", ""), "": _Unit("short", 1, "", ""),
}
for _id, _suffix, _label in (
    ("cps", "c/s", "counts/s"), ("ops", "ops/s", "operations/s"), ("reqps", "req/s", "requests/s"),
    ("rps", "rd/s", "reads/s"), ("wps", "wr/s", "writes/s"), ("iops", "io/s", "I/O operations/s"),
    ("eps", "evt/s", "events/s"), ("mps", "msg/s", "messages/s"), ("recps", "rec/s", "records/s"),
    ("rowsps", "rows/s", "rows/s"), ("cpm", "c/min", "counts/min"), ("opm", "ops/min", "operations/min"),
    ("reqpm", "req/min", "requests/min"), ("mpm", "msg/min", "messages/min"),
):
    _UNITS[_id] = _Unit("short", 1, " " + _suffix, _label)


def _lookup(unit: str) -> _Unit:
    return _UNITS.get(unit) or _Unit("short", 1, " " + unit, unit)


def unit_label(unit: str) -> str:
    """What an axis in ``unit`` measures (``bytes``, ``duration``, ``requests/s``; '' for plain numbers)."""
    return _lookup(unit).label


def _digits(value: float, decimals: Optional[int]) -> str:
    if decimals is not None:
        return f"{value:.{max(0, decimals)}f}"
    size = abs(value)
    if size == 0 or (size < 1e15 and value == int(value)):
        return str(int(value))
    if size >= 100:
        text = f"{value:.0f}"
    elif size >= 10:
        text = f"{value:.1f}"
    elif size >= 1:
        text = f"{value:.2f}"
    else:
        text = f"{value:.3g}"
    return text.rstrip("0").rstrip(".") if "." in text and "e" not in text else text


def _prefixed(value: float, base: float, prefixes: tuple[str, ...], decimals: Optional[int]) -> tuple[str, str]:
    power = 0
    if value != 0:
        power = min(max(int(math.floor(math.log(abs(value), base))), 0), len(prefixes) - 1)
    return _digits(value / base ** power, decimals), prefixes[power]


def _duration(seconds: float, decimals: Optional[int]) -> str:
    size = abs(seconds)
    for limit, scale, name in ((1e-6, 1e-9, "ns"), (1e-3, 1e-6, "µs"), (1, 1e-3, "ms"), (60, 1, "s"),
                               (3600, 60, "min"), (86400, 3600, "h")):
        if size < limit:
            return f"{_digits(seconds / scale, decimals)} {name}" if seconds else "0 s"
    return f"{_digits(seconds / 86400, decimals)} day"


def format_value(value: float, unit: str, *, decimals: Optional[int] = None) -> str:
    """``value`` as Grafana would print it in ``unit`` (``NaN`` / ``+Inf`` as such)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    spec = _lookup(unit)
    value *= spec.factor
    if spec.kind == "time":
        return _duration(value, decimals)
    if spec.kind == "datetime":  # milliseconds since the epoch, shown in UTC
        try:
            return datetime.datetime.fromtimestamp(value, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        except (OverflowError, OSError, ValueError):
            return _digits(value, decimals)
    if spec.kind == "percent":
        return f"{_digits(value, decimals)}%"
    if spec.kind == "none":
        return _digits(value, decimals)
    if spec.kind in ("si", "iec"):
        number, prefix = _prefixed(value, 1000 if spec.kind == "si" else 1024, _SI if spec.kind == "si" else _IEC,
                                   decimals)
        return f"{number}{prefix or (' ' if spec.suffix else '')}{spec.suffix}"
    number, prefix = _prefixed(value, 1000, _SHORT, decimals)
    return f"{number}{prefix}{spec.suffix}"
