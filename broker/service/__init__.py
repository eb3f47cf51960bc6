"""The broker's binary-protocol service: what pulsar-client connects to.

``BrokerService`` is the public face (the broker process and the admin API call only it); ``Topic`` and
``Subscription`` are what it hands out; errors carry protocol codes and HTTP statuses.

Three rooms, imports flowing one way (session -> topics -> policies): ``session/`` (sockets, frames, the
command table, producer endpoints, the connection as its consumers' sink), ``topics/`` (topics,
subscriptions, consumers' state, dispatchers, deduplication, compaction, non-persistent topics; it owns the
Protocols the session implements, ``topics/api.py``), ``policies/`` (backlog quotas, rate limits, delayed
delivery policies, inactive topics, automatic compaction). Beside them: ``errors.py``, ``config.py``,
``stats.py``, ``latency.py``, ``tasks.py``, ``metrics.py``.
"""

from .config import ServiceConfig
from .errors import (BrokerServiceError, ConsumerBusyError, NotAllowedError, PersistenceError, ProducerBusyError,
                     ProducerFencedError, ServiceNotReadyError, SubscriptionAlreadyExistsError,
                     SubscriptionNotFoundError, TopicBusyError, TopicNotFoundError, UnsupportedError)
from .service import BrokerService
from .topics.subscription import Subscription
from .topics.topic import Topic, TopicState

__all__ = [
    "BrokerService", "ServiceConfig", "Topic", "TopicState", "Subscription",
    "BrokerServiceError", "ConsumerBusyError", "NotAllowedError", "PersistenceError", "ProducerBusyError",
    "ProducerFencedError", "ServiceNotReadyError", "SubscriptionAlreadyExistsError", "SubscriptionNotFoundError",
    "TopicBusyError", "TopicNotFoundError", "UnsupportedError",
]
