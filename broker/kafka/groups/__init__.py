"""Kafka consumer groups on a broker: the group coordinator (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups).

Rooms: ``state`` (the pure group state machine), ``placement`` (which broker coordinates a group, pure),
``offsets`` (committed offsets in cursor properties), ``mirror`` (a group's subscription on each partition),
``admin`` (list/describe/delete), ``coordinator`` (the async service the listener calls).
"""

from .coordinator import GROUP_API_KEYS, GroupCoordinator, GroupRequestError, SUPPORTED_VERSIONS
from .placement import KafkaNode

__all__ = ["GROUP_API_KEYS", "GroupCoordinator", "GroupRequestError", "KafkaNode", "SUPPORTED_VERSIONS"]
