"""The broker's binary-protocol service: what pulsar-client connects to.

``BrokerService`` is the public face (the broker process and the admin API call only it); ``Topic`` and
``Subscription`` are what it hands out; errors carry protocol codes and HTTP statuses.

Layout: ``server.py`` / ``connection.py`` (sockets and frames), ``handlers*.py`` (the command table),
``topic.py``, ``producer.py``, ``dedup.py``, ``subscription.py``, ``consumer.py``, ``dispatcher*.py`` (topic
logic), ``wire.py`` / ``entries.py`` / ``key_shared.py`` (pure codecs and decisions), ``stats.py`` /
``metrics.py``.
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
