"""The options of ``spark.read.format("magnetar")``, checked and typed before anything connects anywhere.

Where the data is (one of):

* ``admin.url`` (or ``service.url``; an ``http(s)://`` admin URL of a broker or proxy) and ``metadata.url``
  (the region's ZooKeeper, ``host:port[/chroot]``, as Pulsar SQL's ``zookeeper-uri``): one region, named by
  ``region`` or else by the cluster name the region reports;
* ``regions``: a JSON object ``{"<region>": {"admin.url": ..., "metadata.url": ...}}``: several regions, each
  read on its own, rows labelled with the region's name;
* ``topology``: a ``magnetar up`` deployment's ``topology.json`` (or its data dir): every region's ZooKeeper,
  admin URL and admin credentials from there; ``regions`` may then list the names to read (default all).

What is read: ``topic`` (or ``path``, as in ``load("persistent://...")``) | ``topics`` (comma-separated) |
``topicsPattern`` (a regex over full names in one namespace, ``persistent://tenant/ns/prefix-.*``). Partitioned
topics are read partition by partition, each partition's rows carrying its own name.

From where to where: ``startingOffsets`` / ``endingOffsets`` (see :mod:`spark.source.offsets`);
``endingOffsets`` is refused by streaming reads. How: ``maxEntriesPerSplit`` (a ledger with more entries is
read by several Spark partitions), ``rowsPerBatch`` (rows per Arrow record batch), ``decodeSchema``
(``true``, the default: topics with a JSON or Avro schema give the schema's fields as columns, see
:mod:`spark.source.values`; ``false``: always the ``value`` bytes). Credentials for the admin API:
``auth.token`` or ``auth.token.file``, ``tls.trust.certs.file``.

Option names are case-insensitive (Spark lowercases them); unknown options are refused, so a misspelled
one cannot silently change nothing.
"""

from __future__ import annotations

import json
import pathlib
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from magnetar.admin_client import AdminError, read_token_file
from magnetar.topic_name import InvalidTopicNameError, TopicName

from .errors import SourceOptionError
from .offsets import OffsetSpec, parse_offsets

__all__ = ["RegionSpec", "SourceOptions", "TopicSelection", "parse_options", "pattern_matches", "OPTION_NAMES"]

MAX_ENTRIES_PER_SPLIT_DEFAULT = 5000
ROWS_PER_BATCH_DEFAULT = 4096

OPTION_NAMES: tuple[str, ...] = (
    "admin.url", "service.url", "metadata.url", "region", "regions", "topology",
    "topic", "topics", "topicsPattern", "path",
    "startingOffsets", "endingOffsets", "maxEntriesPerSplit", "rowsPerBatch", "decodeSchema",
    "auth.token", "auth.token.file", "tls.trust.certs.file",
)
_CANONICAL = {name.lower(): name for name in OPTION_NAMES}


@dataclass(frozen=True)
class RegionSpec:
    """How to reach one region.

    Attributes:
        name: the region's label for ``__region`` (None: ask the region for its cluster name).
        admin_url: its admin REST API.
        metadata_url: its ZooKeeper connect string (ledger lists, ledger metadata, bookie addresses).
        token, tls_trust_certs_file: admin credentials; ``explicit`` False: the admin client's defaults
            (``MAGNETAR_AUTH_TOKEN``...).
    """

    name: Optional[str]
    admin_url: str
    metadata_url: str
    token: str = ""
    tls_trust_certs_file: str = ""
    explicit: bool = False


@dataclass(frozen=True)
class TopicSelection:
    """Named topics, or a pattern over one namespace's topics (``namespace`` is ``tenant/ns``)."""

    topics: tuple[str, ...] = ()
    pattern: Optional[str] = None
    namespace: Optional[str] = None


@dataclass(frozen=True)
class SourceOptions:
    regions: tuple[RegionSpec, ...]
    selection: TopicSelection
    starting: OffsetSpec
    ending: OffsetSpec
    max_entries_per_split: int = MAX_ENTRIES_PER_SPLIT_DEFAULT
    rows_per_batch: int = ROWS_PER_BATCH_DEFAULT
    streaming: bool = False
    decode_schema: bool = True


def parse_options(options: Mapping[str, Any], *, streaming: bool = False) -> SourceOptions:
    """Checks every option (see the module docstring); raises :class:`SourceOptionError` naming the first bad one."""
    opts: dict[str, str] = {}
    for key, value in options.items():
        canonical = _CANONICAL.get(str(key).lower())
        if canonical is None:
            raise SourceOptionError(str(key), f"unknown option; the options are {', '.join(OPTION_NAMES)}")
        opts[canonical] = "" if value is None else str(value)
    selection = _selection(opts)
    regions = _regions(opts)
    if streaming and opts.get("endingOffsets", "").strip():
        raise SourceOptionError("endingOffsets", "a streaming read has no end (use spark.read for a bounded read)")
    starting = parse_offsets("startingOffsets", opts.get("startingOffsets", ""),
                             default="latest" if streaming else "earliest")
    ending = parse_offsets("endingOffsets", opts.get("endingOffsets", ""), default="latest")
    if ending == "earliest":
        raise SourceOptionError("endingOffsets", "earliest would read nothing; use latest or positions")
    if starting == "latest" and not streaming:
        raise SourceOptionError("startingOffsets", "latest would read nothing in a bounded read; use earliest "
                                                   "or positions")
    for option, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
        _check_offset_keys(option, spec, regions, selection)
    return SourceOptions(
        regions=regions, selection=selection, starting=starting, ending=ending,
        max_entries_per_split=_positive_int(opts, "maxEntriesPerSplit", MAX_ENTRIES_PER_SPLIT_DEFAULT),
        rows_per_batch=_positive_int(opts, "rowsPerBatch", ROWS_PER_BATCH_DEFAULT),
        streaming=streaming,
        decode_schema=_bool(opts, "decodeSchema", True),
    )


# -------------------------------------------------------------------------------------------- topics


def _topic(option: str, name: str) -> str:
    try:
        topic = TopicName.parse(name.strip())
    except InvalidTopicNameError as e:
        raise SourceOptionError(option, str(e)) from None
    if not topic.persistent:
        raise SourceOptionError(option, f"{topic} is not persistent: non-persistent topics keep no ledgers to read")
    return str(topic)


def _selection(opts: dict[str, str]) -> TopicSelection:
    given = [name for name in ("topic", "path", "topics", "topicsPattern") if opts.get(name, "").strip()]
    if not given:
        raise SourceOptionError("topic", "one of topic, topics or topicsPattern is required")
    if len(given) > 1:
        raise SourceOptionError(given[1], f"give only one of topic, topics or topicsPattern (also given: {given[0]})")
    option = given[0]
    value = opts[option].strip()
    if option == "topicsPattern":
        return _pattern(value)
    names = [n for n in value.split(",")] if option == "topics" else [value]
    if any(not n.strip() for n in names):
        raise SourceOptionError(option, f"an empty topic name in {value!r}")
    topics = tuple(dict.fromkeys(_topic(option, n) for n in names))
    return TopicSelection(topics=topics)


def _pattern(value: str) -> TopicSelection:
    if "://" not in value:
        value = "persistent://public/default/" + value
    domain, _, rest = value.partition("://")
    if domain != "persistent":
        raise SourceOptionError("topicsPattern", f"only persistent topics can be read, not {domain}://")
    parts = rest.split("/", 2)
    if len(parts) != 3 or not parts[2]:
        raise SourceOptionError("topicsPattern", f"expected persistent://tenant/namespace/<regex>, got {value!r}")
    namespace = f"{parts[0]}/{parts[1]}"
    if not re.fullmatch(r"[\w.\-=:]+/[\w.\-=:]+", namespace):
        raise SourceOptionError("topicsPattern", f"the tenant and namespace must be literal, got {namespace!r}")
    try:
        re.compile(value)
    except re.error as e:
        raise SourceOptionError("topicsPattern", f"not a regular expression: {e}") from None
    return TopicSelection(pattern=value, namespace=namespace)


# ------------------------------------------------------------------------------------------- regions


def _admin_url(option: str, url: str) -> str:
    url = url.strip().rstrip("/")
    if not re.fullmatch(r"https?://[^/\s]+", url):
        hint = " (the binary pulsar:// URL cannot list partitions; give the HTTP admin URL)" \
            if url.startswith("pulsar") else ""
        raise SourceOptionError(option, f"expected an http(s)://host:port admin URL, got {url!r}{hint}")
    return url


def _metadata_url(option: str, url: str) -> str:
    url = url.strip()
    if url.startswith("zk://"):
        url = url[len("zk://"):]
    if not re.fullmatch(r"[^\s/,]+:\d+(,[^\s/,]+:\d+)*(/[^\s]*)?", url):
        raise SourceOptionError(option, f"expected a ZooKeeper connect string host:port[,host:port][/chroot], "
                                        f"got {url!r}")
    return url


def _credentials(opts: Mapping[str, str]) -> dict[str, Any]:
    token = opts.get("auth.token", "").strip()
    token_file = opts.get("auth.token.file", "").strip()
    if token and token_file:
        raise SourceOptionError("auth.token.file", "give auth.token or auth.token.file, not both")
    if token_file:
        try:
            token = read_token_file(token_file)
        except AdminError as e:
            raise SourceOptionError("auth.token.file", str(e)) from None
    trust = opts.get("tls.trust.certs.file", "").strip()
    if trust and not pathlib.Path(trust).is_file():
        raise SourceOptionError("tls.trust.certs.file", f"no such file {trust}")
    if token or trust:
        return {"token": token, "tls_trust_certs_file": trust, "explicit": True}
    return {}


def _regions(opts: dict[str, str]) -> tuple[RegionSpec, ...]:
    admin = opts.get("admin.url", "").strip()
    service = opts.get("service.url", "").strip()
    if admin and service:
        raise SourceOptionError("service.url", "give admin.url or service.url, not both")
    admin_option = "admin.url" if admin else "service.url"
    admin = admin or service
    topology = opts.get("topology", "").strip()
    regions = opts.get("regions", "").strip()
    credentials = _credentials(opts)
    if topology:
        for other in ("admin.url", "service.url", "metadata.url", "region"):
            if opts.get(other, "").strip():
                raise SourceOptionError(other, "comes from the topology file when 'topology' is given")
        return _topology_regions(topology, regions, credentials)
    if regions:
        for other in ("admin.url", "service.url", "metadata.url", "region"):
            if opts.get(other, "").strip():
                raise SourceOptionError(other, "give it per region inside 'regions' when reading several")
        return _json_regions(regions, credentials)
    if not admin:
        raise SourceOptionError("admin.url", "required (the region's HTTP admin URL), unless 'regions' or "
                                             "'topology' is given")
    metadata = opts.get("metadata.url", "").strip()
    if not metadata:
        raise SourceOptionError("metadata.url", "required: the region's ZooKeeper (host:port[/chroot]), where "
                                                "its ledger lists are; entries are read from its bookies")
    name = opts.get("region", "").strip() or None
    return (RegionSpec(name, _admin_url(admin_option, admin), _metadata_url("metadata.url", metadata), **credentials),)


def _json_regions(text: str, credentials: dict[str, Any]) -> tuple[RegionSpec, ...]:
    try:
        doc = json.loads(text)
    except ValueError:
        raise SourceOptionError("regions", "expected a JSON object {\"<region>\": {\"admin.url\": ..., "
                                           "\"metadata.url\": ...}} (or, with 'topology', a list of names)") from None
    if not isinstance(doc, dict) or not doc:
        raise SourceOptionError("regions", "expected a non-empty JSON object of regions")
    out = []
    for name, spec in doc.items():
        if isinstance(spec, str):
            raise SourceOptionError("regions", f"region {name!r}: give {{\"admin.url\": {spec!r}, \"metadata.url\": "
                                               "\"<its ZooKeeper>\"}: entries are read from the region's bookies")
        if not isinstance(spec, dict):
            raise SourceOptionError("regions", f"region {name!r}: expected an object, got {spec!r}")
        unknown = set(spec) - {"admin.url", "metadata.url", "auth.token", "tls.trust.certs.file"}
        if unknown:
            raise SourceOptionError("regions", f"region {name!r}: unknown keys {sorted(unknown)}")
        for key in ("admin.url", "metadata.url"):
            if not isinstance(spec.get(key), str) or not spec[key].strip():
                raise SourceOptionError("regions", f"region {name!r}: {key} is required")
        own = dict(credentials)
        if spec.get("auth.token") or spec.get("tls.trust.certs.file"):
            own = {"token": str(spec.get("auth.token", "")), "explicit": True,
                   "tls_trust_certs_file": str(spec.get("tls.trust.certs.file", ""))}
        out.append(RegionSpec(name, _admin_url("regions", spec["admin.url"]),
                              _metadata_url("regions", spec["metadata.url"]), **own))
    return tuple(out)


def _topology_regions(path_text: str, names_text: str, credentials: dict[str, Any]) -> tuple[RegionSpec, ...]:
    path = pathlib.Path(path_text).expanduser()
    if path.is_dir():
        path = path / "topology.json"
    try:
        doc = json.loads(path.read_text())
        regions = doc["regions"]
        if not isinstance(regions, dict):
            raise ValueError("'regions' is not an object")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SourceOptionError("topology", f"cannot read a topology from {path}: {e}") from None
    wanted = [n.strip() for n in names_text.split(",") if n.strip()] if names_text else list(regions)
    unknown = [n for n in wanted if n not in regions]
    if unknown:
        raise SourceOptionError("regions", f"{unknown} not in the topology (it has {sorted(regions)})")
    security = doc.get("security") or None
    if not credentials and security:
        admin_role = (security.get("superuser_roles") or ["admin"])[0]
        token_file = ((security.get("roles") or {}).get(admin_role) or {}).get("token_file", "")
        try:
            token = read_token_file(token_file) if token_file else ""
        except AdminError as e:
            raise SourceOptionError("topology", str(e)) from None
        credentials = {"token": token, "tls_trust_certs_file": security.get("ca_file", ""), "explicit": True}
    out = []
    for name in wanted:
        entry = regions[name]
        try:
            zk = entry["zookeeper"]["connect"]
            proxy = entry.get("proxy")
            brokers = entry.get("brokers") or []
            if proxy and security:
                admin = proxy["https"]
            elif brokers:
                admin = brokers[0].get("https") if security and brokers[0].get("https") else brokers[0]["http"]
            else:
                raise KeyError("brokers")
        except (KeyError, TypeError) as e:
            raise SourceOptionError("topology", f"region {name!r} in {path} lacks {e}") from None
        out.append(RegionSpec(name, _admin_url("topology", admin), _metadata_url("topology", zk), **credentials))
    return tuple(out)


# --------------------------------------------------------------------------------------------- misc


def _bool(opts: Mapping[str, str], option: str, default: bool) -> bool:
    text = opts.get(option, "").strip().lower()
    if not text:
        return default
    if text not in ("true", "false"):
        raise SourceOptionError(option, f"true or false, not {opts[option]!r}")
    return text == "true"


def _positive_int(opts: Mapping[str, str], option: str, default: int) -> int:
    text = opts.get(option, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise SourceOptionError(option, f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise SourceOptionError(option, f"expected a positive integer, got {value}")
    return value


def _check_offset_keys(option: str, spec: OffsetSpec, regions: tuple[RegionSpec, ...],
                       selection: TopicSelection) -> None:
    if isinstance(spec, str):
        return
    if "" in spec and len(regions) > 1:
        raise SourceOptionError(option, "several regions are read: key positions by region first "
                                        "({\"<region>\": {\"<topic>\": {...}}}); ledger ids differ between regions")
    named = {r.name for r in regions}
    for region, topics in spec.items():
        if region and region not in named and None not in named:
            raise SourceOptionError(option, f"region {region!r} is not read (regions: {sorted(n for n in named if n)})")
        for topic in topics:
            name = _topic(option, topic)
            if name != topic:
                raise SourceOptionError(option, f"use the full topic name {name!r}, not {topic!r}")
            if selection.topics and not _selected(name, selection):
                raise SourceOptionError(option, f"{topic} is not among the topics read ({', '.join(selection.topics)})")
            if selection.pattern and not pattern_matches(selection.pattern, name):
                raise SourceOptionError(option, f"{topic} does not match topicsPattern {selection.pattern!r}")


def pattern_matches(pattern: str, topic: str) -> bool:
    """A topic matches by its own name or, for a partition, by its partitioned topic's name."""
    base = str(TopicName.parse(topic).base)
    return re.fullmatch(pattern, topic) is not None or re.fullmatch(pattern, base) is not None


def _selected(topic: str, selection: TopicSelection) -> bool:
    return topic in selection.topics or str(TopicName.parse(topic).base) in selection.topics
