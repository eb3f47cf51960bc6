"""The series each kind of process exports, read from live ``/metrics``: the table of docs/observability.md.

``python -m observability.series --topology <data-dir>/topology.json`` scrapes one process of each kind of a
running deployment (under load, so per-topic, per-subscription and replication series exist) and prints a
Markdown table per kind: name as exposed, type, label names, meaning (the HELP text). The e2e test of the
observability plane scrapes every process and fails on a name the document does not list, so the table is
regenerated when a series is added.

A family whose name holds a deployment's path (BookKeeper's ``bookie_ledger_dir_<path>_usage``) is listed
with ``<path>`` in its place (:func:`documented_name`).
"""

from __future__ import annotations

import argparse
import json
import re
import ssl
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from prometheus_client.parser import text_string_to_metric_families

KINDS = ("broker", "bookie", "proxy", "zookeeper", "autorecovery")
_PATHLIKE = re.compile(r"^bookie_ledger_dir_.+_usage$")


@dataclass
class Family:
    name: str  # as exposed in ``# TYPE`` (counters with ``_total``)
    type: str
    help: str
    labels: set[str] = field(default_factory=set)


def documented_name(name: str) -> str:
    """The name a family is listed under (a path in the name becomes ``<path>``)."""
    return "bookie_ledger_dir_<path>_usage" if _PATHLIKE.match(name) else name


def families(text: str) -> dict[str, Family]:
    """Every family of an exposition (text format 0.0.4), keyed by its exposed name, with the label names its
    samples carry."""
    found: dict[str, Family] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            found.setdefault(name, Family(name, kind.strip(), ""))
    for family in text_string_to_metric_families(text):
        exposed = next((n for n in (family.name + "_total", family.name) if n in found), None)
        if exposed is None:
            continue
        entry = found[exposed]
        entry.help = family.documentation
        for sample in family.samples:
            entry.labels.update(sample.labels)
    return found


def scrape(url: str, *, ca_file: Optional[str] = None, cert: Optional[tuple[str, str]] = None,
           timeout_s: float = 10.0) -> str:
    context = None
    if url.startswith("https://"):
        context = ssl.create_default_context(cafile=ca_file)
        if cert is not None:
            context.load_cert_chain(*cert)
    with urllib.request.urlopen(url, timeout=timeout_s, context=context) as response:
        return response.read().decode()


def metrics_endpoints(topology: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(kind, process name, /metrics URL) of every process of a deployment's topology.json."""
    entries = [topology["global_zookeeper"]] if "global_zookeeper" in topology else []
    for region in topology["regions"].values():
        entries.append(region["zookeeper"])
        entries.extend(region.get("bookies", []))
        entries.extend(region.get("autorecovery", []))
        entries.extend(region.get("brokers", []))
        entries.extend([region["proxy"]] if "proxy" in region else [])
    return [(e["kind"], e["name"], e["metrics"]) for e in entries if e.get("metrics")]


def client_material(topology: dict[str, Any]) -> tuple[Optional[str], Optional[tuple[str, str]]]:
    """The CA and the ``prometheus`` role's certificate, to scrape proxies (HTTPS, client certificates)."""
    security = topology.get("security")
    if not security:
        return None, None
    role = security["roles"].get("prometheus")
    return security["ca_file"], ((role["cert_file"], role["key_file"]) if role else None)


def markdown(by_kind: dict[str, dict[str, Family]]) -> str:
    lines = []
    for kind in KINDS:
        fams = by_kind.get(kind)
        if not fams:
            continue
        lines += [f"### {kind}", "", "| series | type | labels | meaning |", "|---|---|---|---|"]
        for name in sorted({documented_name(n) for n in fams}):
            fam = next(f for n, f in fams.items() if documented_name(n) == name)
            labels = ", ".join(f"`{label}`" for label in sorted(fam.labels)) or "–"
            meaning = " ".join(fam.help.split()).replace("|", "\\|")
            lines.append(f"| `{name}` | {fam.type} | {labels} | {meaning} |")
        lines.append("")
    return "\n".join(lines)


def collect(topology: dict[str, Any], kinds: Iterable[str] = KINDS) -> dict[str, dict[str, Family]]:
    """Every family of every process of each kind, merged by kind (labels united)."""
    ca, cert = client_material(topology)
    merged: dict[str, dict[str, Family]] = {}
    for kind, _name, url in metrics_endpoints(topology):
        if kind not in kinds:
            continue
        for name, fam in families(scrape(url, ca_file=ca, cert=cert)).items():
            into = merged.setdefault(kind, {}).setdefault(name, Family(fam.name, fam.type, fam.help))
            into.labels |= fam.labels
    return merged


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", required=True, help="a running deployment's topology.json")
    args = parser.parse_args(argv)
    with open(args.topology) as f:
        topology = json.load(f)
    print(markdown(collect(topology)))


if __name__ == "__main__":
    main()
