"""Topic logic of the Kafka listener: names, partition counts, creation, owners, the local topic.

Kafka talks in (topic, partition); Pulsar in topics and partitions of partitioned topics (``names.py``).
A topic exists for Kafka when it is a partitioned topic (its metadata in the configuration store) or a
non-partitioned topic with a managed ledger (one Kafka partition). Auto-creation makes a partitioned topic of
``num_partitions`` (Kafka's ``num.partitions``), so a later CreatePartitions can grow it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Optional

from config_store.errors import MetadataError as StoreError
from config_store.errors import NodeExistsError, NotFoundError
from magnetar.errors import MagnetarError
from magnetar.topic_name import TopicName

from . import names
from .config import KafkaConfig

if TYPE_CHECKING:
    from broker.service import BrokerService

log = logging.getLogger("broker.kafka.topics")

_COUNT_CACHE_S = 5.0
_COUNT_CACHE_MAX = 10_000


class NotLeaderError(MagnetarError):
    """This broker does not own the partition (the client refreshes its metadata)."""


class KafkaTopics:
    def __init__(self, service: "BrokerService", config: KafkaConfig) -> None:
        self.service = service
        self.config = config
        self._counts: dict[str, tuple[float, int]] = {}  # topic -> (read at, partition count)

    def resolve(self, kafka_topic: str) -> TopicName:
        """Raises InvalidTopicNameError."""
        return names.pulsar_name(kafka_topic, tenant=self.config.tenant, namespace=self.config.namespace)

    def kafka_name(self, topic: TopicName) -> str:
        return names.kafka_name(topic, tenant=self.config.tenant, namespace=self.config.namespace)

    async def partitions(self, topic: TopicName, *, at_least: int = 0, fresh: bool = False) -> Optional[int]:
        """Pulsar's partition count (0: non-partitioned), None when the topic does not exist.

        Counts of existing topics are cached for ``_COUNT_CACHE_S`` (Produce and Fetch ask on every request;
        a count only grows): a request for partition ``at_least`` or above reads the store again, as does
        ``fresh`` (Metadata, admin requests: what clients plan with is read from the store)."""
        key = str(topic)
        cached = self._counts.get(key)
        now = time.monotonic()
        if not fresh and cached is not None and now - cached[0] < _COUNT_CACHE_S and at_least < max(cached[1], 1):
            return cached[1]
        count = await self.service.partitions_of(topic)
        if not count:
            if key in self.service.topics() or await self.service.ml_factory.exists(topic.path):
                count = 0
            else:
                self._counts.pop(key, None)
                return None
        if len(self._counts) >= _COUNT_CACHE_MAX:
            self._counts.pop(next(iter(self._counts)))
        self._counts[key] = (now, count)
        return count

    def forget(self, topic: TopicName) -> None:
        """Drops the cached count (the topic was deleted or grown here)."""
        self._counts.pop(str(topic), None)

    async def create(self, topic: TopicName, partitions: int) -> bool:
        """Creates a partitioned topic; False when it exists already.

        Raises:
            NotFoundError: the namespace does not exist.
        """
        if not topic.persistent:
            raise NotFoundError(f"{topic}: only persistent topics can be created through Kafka")
        try:
            await self.service.configuration_store.create_partitioned_topic(
                topic.tenant, topic.namespace_portion, topic.domain.value, topic.local_name, partitions)
        except NodeExistsError:
            return False
        log.info("[%s] created with %d partition(s) through Kafka", topic, partitions)
        return True

    async def ensure(self, topic: TopicName, *, create: bool, at_least: int = 0, fresh: bool = False) -> Optional[int]:
        """The partition count, creating the topic when it is missing and ``create`` (and auto-creation) allow."""
        count = await self.partitions(topic, at_least=at_least, fresh=fresh)
        if count is not None or not create or not self.config.allow_auto_create_topics:
            return count
        try:
            await self.create(topic, self.config.num_partitions)
        except (NotFoundError, StoreError) as exc:
            log.info("[%s] not auto-created: %s", topic, exc)
            return None
        return await self.partitions(topic, fresh=True)

    async def allowed(self, ctx: Any, topic: TopicName, action: str) -> bool:
        """Whether the connection's principal may ``action`` (produce, consume, lookup, admin) on ``topic``:
        the broker's authorization rules (always True when authorization is off); a refusal is counted."""
        security = self.service.security
        if not security.authorization_enabled:
            return True
        role = ctx.principal
        if action == "produce":
            ok = await security.can_produce(role, None, topic)
        elif action == "consume":
            ok = await security.can_consume(role, None, topic, None)
        elif action == "lookup":
            ok = await security.can_lookup(role, None, topic)
        else:
            ok = await security.can_administer_tenant(role, None, topic.tenant)
        if not ok:
            security.count_denial(action)
        return ok

    async def lookup(self, pulsar_topic: str) -> Any:
        """Where ``pulsar_topic`` is served (assigning its bundle if nobody owns it)."""
        return await self.service.ownership.lookup(pulsar_topic)

    async def local(self, pulsar_topic: str) -> Any:
        """The topic as served here.

        An unowned topic is acquired here when the lookup's rules pick this broker: Metadata may have named
        this broker the leader of a bundle nobody owned yet (a lookup elsewhere chose it, as a Pulsar lookup
        redirects), and the client's first request is where it takes the bundle, as the end of a Pulsar
        redirect does (an authoritative lookup).

        Raises:
            NotLeaderError: another broker owns it.
        """
        ownership = self.service.ownership
        if not await ownership.is_owned_by_me(pulsar_topic):
            try:
                result = await ownership.lookup(pulsar_topic, authoritative=True)
            except MagnetarError as exc:
                raise NotLeaderError(f"{pulsar_topic}: {exc}") from None
            if not result.is_self:
                raise NotLeaderError(pulsar_topic)
        return await self.service.get_topic(pulsar_topic, create=True)
