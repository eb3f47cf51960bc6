"""Topic logic of the Kafka listener: names, partition counts, creation, owners, the local topic.

Kafka talks in (topic, partition); Pulsar in topics and partitions of partitioned topics (``names.py``).
A topic exists for Kafka when it is a partitioned topic (its metadata in the configuration store) or a
non-partitioned topic with a managed ledger (one Kafka partition). Auto-creation makes a partitioned topic of
``num_partitions`` (Kafka's ``num.partitions``), so a later CreatePartitions can grow it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Optional

from config_store.errors import MetadataError as StoreError
from config_store.errors import NodeExistsError, NotFoundError
from magnetar.topic_name import TopicName

from . import names
from .config import KafkaConfig

if TYPE_CHECKING:
    from broker.service import BrokerService

log = logging.getLogger("broker.kafka.topics")


class NotLeaderError(Exception):
    """This broker does not own the partition (the client refreshes its metadata)."""


class KafkaTopics:
    def __init__(self, service: "BrokerService", config: KafkaConfig) -> None:
        self.service = service
        self.config = config

    def resolve(self, kafka_topic: str) -> TopicName:
        """Raises InvalidTopicNameError."""
        return names.pulsar_name(kafka_topic, tenant=self.config.tenant, namespace=self.config.namespace)

    def kafka_name(self, topic: TopicName) -> str:
        return names.kafka_name(topic, tenant=self.config.tenant, namespace=self.config.namespace)

    async def partitions(self, topic: TopicName) -> Optional[int]:
        """Pulsar's partition count (0: non-partitioned), None when the topic does not exist."""
        count = await self.service.partitions_of(topic)
        if count:
            return count
        if str(topic) in self.service.topics() or await self.service.ml_factory.exists(topic.path):
            return 0
        return None

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

    async def ensure(self, topic: TopicName, *, create: bool) -> Optional[int]:
        """The partition count, creating the topic when it is missing and ``create`` (and auto-creation) allow."""
        count = await self.partitions(topic)
        if count is not None or not create or not self.config.allow_auto_create_topics:
            return count
        try:
            await self.create(topic, self.config.num_partitions)
        except (NotFoundError, StoreError) as exc:
            log.info("[%s] not auto-created: %s", topic, exc)
            return None
        return await self.partitions(topic)

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

        Raises:
            NotLeaderError: another broker owns it (or nobody yet).
        """
        if not await self.service.ownership.is_owned_by_me(pulsar_topic):
            raise NotLeaderError(pulsar_topic)
        return await self.service.get_topic(pulsar_topic, create=True)
