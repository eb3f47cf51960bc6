"""Magnetar: geo-replicated publish/subscribe on Apache Pulsar's architecture.

This package holds what every component shares (errors, the internal wire, the ZooKeeper runner, the
``magnetar`` command line). The components live in their own top-level packages (rooms): ``config_store``,
``bookie``, ``clusters``, ``observability``.
"""

__version__ = "0.1.0"
