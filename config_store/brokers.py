"""A region's live brokers and the ownership of namespace bundles.

Layout (in the region's own ZooKeeper, as DESIGN §5)::

    /brokers/<broker-id>                     BrokerRegistration, ephemeral: one per live broker, with its
                                             URLs and its last load report
    /namespace/<tenant>/<ns>/<bundle>        BundleOwner, ephemeral: the broker serving that bundle
                                             (``<bundle>`` is Pulsar's ``0x00000000_0x40000000`` form)

Guarantees: a bundle has at most one owner (the ephemeral create is the lock: exactly one create wins);
an owner's node vanishes with its session (broker death, session expiry), so a later lookup re-assigns
it; an owner record is only ever rewritten (``disabled``) or deleted by compare-and-set on the version
its owner read, so a broker never clobbers another broker's ownership.

Field names follow Pulsar's JSON (``LocalBrokerData``: ``pulsarServiceUrl``, ``webServiceUrl``,
``numTopics``, ``advertisedListeners``, ...; ``NamespaceEphemeralData``: ``nativeUrl``, ``httpUrl``,
``disabled``, ``advertisedListeners``, ...). Both records carry the broker's advertised listeners, so any
broker answers a lookup for a listener with the owner's (or the chosen broker's) URL for it without
another read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass

from .configuration import check_name
from .ephemeral import EphemeralRegistration
from .errors import InvalidMetadataError, NodeExistsError, NotFoundError
from .models import Versioned, _dumps, _field, _loads
from .store import MetadataStore, join_path

log = logging.getLogger("config_store")

BROKERS = "/brokers"
NAMESPACE_OWNERSHIP = "/namespace"


def broker_path(broker_id: str) -> str:
    return join_path(BROKERS, check_name("broker id", broker_id))


def bundle_path(tenant: str, namespace: str, bundle: str) -> str:
    return (f"{NAMESPACE_OWNERSHIP}/{check_name('tenant', tenant)}/{check_name('namespace', namespace)}/"
            f"{check_name('bundle', bundle)}")


@dataclass(frozen=True)
class AdvertisedListener:
    """One named address set of a broker (Pulsar's ``AdvertisedListener``): what a client that asks for
    listener ``name`` in its lookup is told to connect to.

    Attributes:
        name: the listener name clients give (``listener_name`` in pulsar-client).
        broker_service_url: ``pulsar://host:port``, or "".
        broker_service_url_tls: ``pulsar+ssl://host:port``, or "".
    """

    name: str
    broker_service_url: str = ""
    broker_service_url_tls: str = ""

    def to_dict(self) -> dict[str, str]:
        out = {}
        if self.broker_service_url:
            out["brokerServiceUrl"] = self.broker_service_url
        if self.broker_service_url_tls:
            out["brokerServiceUrlTls"] = self.broker_service_url_tls
        return out


def listeners_to_json(listeners: tuple[AdvertisedListener, ...]) -> dict[str, dict[str, str]]:
    """``{"name": {"brokerServiceUrl": ..., "brokerServiceUrlTls": ...}}`` as Pulsar stores them."""
    return {listener.name: listener.to_dict() for listener in listeners}


def listeners_from_json(kind: str, obj: dict) -> tuple[AdvertisedListener, ...]:
    """Reads ``advertisedListeners`` (absent: none, as written by a broker without listeners)."""
    raw = _field(kind, obj, "advertisedListeners", dict, dict)
    listeners = []
    for name, urls in raw.items():
        if not isinstance(urls, dict):
            raise InvalidMetadataError(f"{kind}: advertisedListeners.{name} must be an object")
        k = f"{kind}: advertisedListeners.{name}"
        listeners.append(AdvertisedListener(name, _field(k, urls, "brokerServiceUrl", str, ""),
                                            _field(k, urls, "brokerServiceUrlTls", str, "")))
    return tuple(listeners)


def find_listener(listeners: tuple[AdvertisedListener, ...], name: str) -> AdvertisedListener | None:
    """The listener called ``name``, or None."""
    return next((listener for listener in listeners if listener.name == name), None)


@dataclass(frozen=True)
class BundleStats:
    """The load of one namespace bundle on its owner (Pulsar's ``NamespaceBundleStats``).

    Attributes:
        bundle: ``tenant/ns/0x00000000_0x40000000``.
        topics: topics of the bundle loaded on the owner.
        producer_count, consumer_count: connected producers and consumers (sessions, together).
        msg_rate_in, msg_rate_out: messages/s published and dispatched.
        msg_throughput_in, msg_throughput_out: bytes/s published and dispatched.
    """

    bundle: str
    topics: int = 0
    producer_count: int = 0
    consumer_count: int = 0
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0

    _INTS = {"topics": "topics", "producer_count": "producerCount", "consumer_count": "consumerCount"}
    _FLOATS = {"msg_rate_in": "msgRateIn", "msg_rate_out": "msgRateOut", "msg_throughput_in": "msgThroughputIn",
               "msg_throughput_out": "msgThroughputOut"}

    @property
    def sessions(self) -> int:
        return self.producer_count + self.consumer_count

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def msg_throughput(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out

    def to_dict(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {j: getattr(self, n) for n, j in self._INTS.items()}
        out.update({j: round(getattr(self, n), 3) for n, j in self._FLOATS.items()})
        return out

    @classmethod
    def from_dict(cls, kind: str, bundle: str, obj: dict) -> "BundleStats":
        if not isinstance(obj, dict):
            raise InvalidMetadataError(f"{kind}: lastStats of {bundle} must be an object")
        return cls(bundle=bundle, **{n: _field(kind, obj, j, int, 0) for n, j in cls._INTS.items()},
                   **{n: float(_field(kind, obj, j, (int, float), 0.0)) for n, j in cls._FLOATS.items()})


@dataclass(frozen=True)
class BrokerLoad:
    """What a broker reports about its load (a subset of Pulsar's ``LocalBrokerData``: counts, message
    rates in/out (messages/s), throughput in/out (bytes/s), and per-bundle stats as ``lastStats``)."""

    num_topics: int = 0
    num_bundles: int = 0
    num_producers: int = 0
    num_consumers: int = 0
    connections: int = 0
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0
    bundle_stats: tuple[BundleStats, ...] = ()

    _JSON = {"num_topics": "numTopics", "num_bundles": "numBundles", "num_producers": "numProducers",
             "num_consumers": "numConsumers", "connections": "connections"}
    _FLOATS = {"msg_rate_in": "msgRateIn", "msg_rate_out": "msgRateOut", "msg_throughput_in": "msgThroughputIn",
               "msg_throughput_out": "msgThroughputOut"}

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {json_name: getattr(self, name) for name, json_name in self._JSON.items()}
        out.update({json_name: round(getattr(self, name), 3) for name, json_name in self._FLOATS.items()})
        out["bundles"] = [s.bundle for s in self.bundle_stats]
        out["lastStats"] = {s.bundle: s.to_dict() for s in self.bundle_stats}
        return out

    @classmethod
    def from_dict(cls, kind: str, obj: dict) -> "BrokerLoad":
        last = _field(kind, obj, "lastStats", dict, dict)
        return cls(**{name: _field(kind, obj, json_name, int, 0) for name, json_name in cls._JSON.items()},
                   **{name: float(_field(kind, obj, json_name, (int, float), 0.0))
                      for name, json_name in cls._FLOATS.items()},
                   bundle_stats=tuple(BundleStats.from_dict(kind, b, v) for b, v in sorted(last.items())))


def _protocols(kind: str, obj: dict) -> tuple[tuple[str, str], ...]:
    """Reads ``protocols`` (absent: none, as written by a broker serving only Pulsar's protocol)."""
    value = _field(kind, obj, "protocols", dict, {})
    for key, address in value.items():
        if not isinstance(address, str):
            raise InvalidMetadataError(f"{kind}: protocols.{key} must be a string, not {type(address).__name__}")
    return tuple(sorted(value.items()))


@dataclass(frozen=True)
class BrokerRegistration:
    """A live broker: how to reach it, and its load as last reported.

    Attributes:
        broker_id: its identity in ``/brokers/``.
        pulsar_service_url: ``pulsar://host:port`` (binary protocol).
        web_service_url: ``http://host:port`` (admin, lookup, /metrics).
        cluster: the region (Pulsar cluster) it serves.
        instance: a token unique to the running process, so a restarted broker can tell its own leftover
            ownership records (from its previous, not yet expired session) from live ones.
        advertised_listeners: its named listeners (none: only the URLs above).
        protocols: the other protocols it serves, by name (Pulsar ``LocalBrokerData.protocols``): ``kafka`` is
            its advertised Kafka listeners (``PLAINTEXT://host:port[,...]``), so any broker can name another's.
        load: the last load report.
        last_update_ms: when the load was measured (wall clock, ms).
    """

    broker_id: str
    pulsar_service_url: str
    web_service_url: str
    cluster: str = ""
    instance: str = ""
    pulsar_service_url_tls: str = ""
    web_service_url_tls: str = ""
    advertised_listeners: tuple[AdvertisedListener, ...] = ()
    protocols: tuple[tuple[str, str], ...] = ()
    load: BrokerLoad = BrokerLoad()
    last_update_ms: int = 0

    def protocol(self, name: str) -> str:
        """The address this broker gives for protocol ``name`` ("" when it does not serve it)."""
        return next((value for key, value in self.protocols if key == name), "")

    def to_json(self) -> bytes:
        return _dumps("BrokerRegistration", {
            "brokerId": self.broker_id,
            "pulsarServiceUrl": self.pulsar_service_url,
            "pulsarServiceUrlTls": self.pulsar_service_url_tls,
            "webServiceUrl": self.web_service_url,
            "webServiceUrlTls": self.web_service_url_tls,
            "cluster": self.cluster,
            "instance": self.instance,
            "lastUpdate": self.last_update_ms,
            "advertisedListeners": listeners_to_json(self.advertised_listeners),
            "protocols": dict(self.protocols),
            **self.load.to_dict(),
        })

    @classmethod
    def from_json(cls, data: bytes) -> "BrokerRegistration":
        k = "BrokerRegistration"
        o = _loads(k, data)
        return cls(
            broker_id=_field(k, o, "brokerId", str),
            pulsar_service_url=_field(k, o, "pulsarServiceUrl", str),
            web_service_url=_field(k, o, "webServiceUrl", str),
            cluster=_field(k, o, "cluster", str, ""),
            instance=_field(k, o, "instance", str, ""),
            pulsar_service_url_tls=_field(k, o, "pulsarServiceUrlTls", str, ""),
            web_service_url_tls=_field(k, o, "webServiceUrlTls", str, ""),
            advertised_listeners=listeners_from_json(k, o),
            protocols=_protocols(k, o),
            load=BrokerLoad.from_dict(k, o),
            last_update_ms=_field(k, o, "lastUpdate", int, 0),
        )

    @property
    def web_address(self) -> str:
        """``host:port`` of the web service (what Pulsar's ``GET /admin/v2/brokers/<cluster>`` lists)."""
        url = self.web_service_url
        return url.split("://", 1)[1].rstrip("/") if "://" in url else url


@dataclass(frozen=True)
class BundleOwner:
    """Who serves a namespace bundle (Pulsar's ``NamespaceEphemeralData``).

    ``disabled`` is set by the owner while it unloads the bundle: lookups answer "try again" instead of
    sending clients to a broker that is about to let go. ``advertised_listeners`` are the owner's (see
    :class:`AdvertisedListener`).
    """

    broker_id: str
    native_url: str
    http_url: str
    instance: str = ""
    native_url_tls: str = ""
    http_url_tls: str = ""
    disabled: bool = False
    advertised_listeners: tuple[AdvertisedListener, ...] = ()

    def to_json(self) -> bytes:
        return _dumps("BundleOwner", {
            "brokerId": self.broker_id,
            "nativeUrl": self.native_url,
            "nativeUrlTls": self.native_url_tls,
            "httpUrl": self.http_url,
            "httpUrlTls": self.http_url_tls,
            "instance": self.instance,
            "disabled": self.disabled,
            "advertisedListeners": listeners_to_json(self.advertised_listeners),
        })

    @classmethod
    def from_json(cls, data: bytes) -> "BundleOwner":
        k = "BundleOwner"
        o = _loads(k, data)
        return cls(
            broker_id=_field(k, o, "brokerId", str),
            native_url=_field(k, o, "nativeUrl", str),
            http_url=_field(k, o, "httpUrl", str),
            instance=_field(k, o, "instance", str, ""),
            native_url_tls=_field(k, o, "nativeUrlTls", str, ""),
            http_url_tls=_field(k, o, "httpUrlTls", str, ""),
            disabled=_field(k, o, "disabled", bool, False),
            advertised_listeners=listeners_from_json(k, o),
        )


class BrokerRegistry:
    """Typed access to ``/brokers`` and ``/namespace`` of one region (see the module docstring)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    # ------------------------------------------------------------------------------------------ brokers

    async def register(self, reg: BrokerRegistration) -> EphemeralRegistration:
        """Publishes ``reg`` as an ephemeral node the store re-creates after a session loss. Update it with
        ``handle.update(new.to_json())``; ``handle.close()`` removes it."""
        return await self.store.register_ephemeral(broker_path(reg.broker_id), reg.to_json())

    async def list_brokers(self) -> dict[str, BrokerRegistration]:
        """The live brokers by id (unreadable registrations are logged and skipped)."""
        ids = await self.store.children(BROKERS)
        values = await asyncio.gather(*(self.store.get(join_path(BROKERS, i)) for i in ids))
        brokers: dict[str, BrokerRegistration] = {}
        for broker_id, versioned in zip(ids, values):
            if versioned is None:
                continue  # gone between the listing and the read
            try:
                brokers[broker_id] = BrokerRegistration.from_json(versioned.value)
            except InvalidMetadataError as e:
                log.warning("skipping unreadable broker registration %s: %s", join_path(BROKERS, broker_id), e)
        return brokers

    async def get_broker(self, broker_id: str) -> BrokerRegistration | None:
        versioned = await self.store.get(broker_path(broker_id))
        return None if versioned is None else BrokerRegistration.from_json(versioned.value)

    # ------------------------------------------------------------------------------------------ bundles

    async def get_owner(self, tenant: str, namespace: str, bundle: str) -> Versioned[BundleOwner] | None:
        """The bundle's owner record, or None when nobody owns it."""
        path = bundle_path(tenant, namespace, bundle)
        versioned = await self.store.get(path)
        if versioned is None:
            return None
        try:
            return Versioned(BundleOwner.from_json(versioned.value), versioned.version)
        except InvalidMetadataError as e:
            raise InvalidMetadataError(f"{path}: {e}") from None

    async def try_acquire(self, tenant: str, namespace: str, bundle: str, owner: BundleOwner) -> bool:
        """Creates the ephemeral owner node; True if this call created it, False if someone holds it."""
        try:
            await self.store.create(bundle_path(tenant, namespace, bundle), owner.to_json(), ephemeral=True,
                                    make_parents=True)
        except NodeExistsError:
            return False
        return True

    async def set_disabled(self, tenant: str, namespace: str, bundle: str, owner: BundleOwner, *,
                           expected_version: int) -> int:
        """Marks the record ``disabled`` (compare-and-set); returns the new version."""
        data = dataclasses.replace(owner, disabled=True).to_json()
        return await self.store.set(bundle_path(tenant, namespace, bundle), data, expected_version=expected_version)

    async def release(self, tenant: str, namespace: str, bundle: str, *, expected_version: int) -> bool:
        """Deletes the owner node if it is still at ``expected_version``; False if it was already gone."""
        try:
            await self.store.delete(bundle_path(tenant, namespace, bundle), expected_version=expected_version)
        except NotFoundError:
            return False
        return True

    async def owned_bundles(self, tenant: str, namespace: str) -> list[str]:
        """The bundles of ``tenant/namespace`` that have an owner right now."""
        return await self.store.children(
            f"{NAMESPACE_OWNERSHIP}/{check_name('tenant', tenant)}/{check_name('namespace', namespace)}")
