"""Topic lists as Pulsar clients see them: pattern matching and the topic-list hash (pure).

A pattern consumer finds its topics by asking a broker for a namespace's topics, over and over
(GET_TOPICS_OF_NAMESPACE), or, where client and broker both support it, by watching them (WATCH_TOPIC_LIST,
``topic_list_watch.py``). Both answers carry the same two things computed here.

Patterns. A client sends its pattern as the application wrote it, domain included
(``persistent://public/default/orders-.*``). Pulsar's broker removes the domain scheme from the pattern and
matches what is left against each topic's name without its scheme and without a partition suffix
(``public/default/orders-a`` for ``persistent://public/default/orders-a-partition-3``), as a whole (Java's
``Matcher.matches``): a partition is listed exactly when its partitioned topic's name matches.

Hash. CRC32C of the sorted names (UTF-8), separated by ``,`` (none after the last), written the way Guava's
``HashCode.toString`` writes a 32-bit hash: its four bytes least significant first, as lower-case hex
(Pulsar's ``TopicList.calculateHash``). A client sends back the hash it last got; when it still holds, the
broker answers ``changed = false`` and leaves the topics out. Recent Java clients also compute the hash of
their own topic list and compare it with the broker's, so the names hashed are exactly the names listed.

Safety. Python's ``re`` backtracks, and the client's pattern runs on the broker's event loop (Pulsar uses
RE2J, which never backtracks). A pattern is evaluated only if it is at most ``max_length`` characters long
(Pulsar's ``subscriptionPatternMaxLength``, 50 by default) and cannot backtrack badly: no repetition inside a
repetition, no alternation or back-reference inside a repetition, at most three unbounded repetitions. A
poll then answers unfiltered (``filtered = false``: the client filters itself); a watch is refused.
"""

from __future__ import annotations

import functools
import re
from typing import Iterable, Optional

from magnetar.protocol.checksum import crc32c
from magnetar.topic_name import InvalidTopicNameError as _BadTopicName, TopicName

from ..errors import InvalidTopicNameError, NotAllowedError

try:  # the parser behind re.compile; private, so its absence only disables the safety analysis
    from re import _constants as _sre, _parser as _sre_parser  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    _sre = _sre_parser = None

PATTERN_MAX_LENGTH_DEFAULT = 50
_UNBOUNDED_REPEATS_MAX = 3
_UNBOUNDED_FROM = 16  # a repetition allowing more than this many counts as unbounded
_DOMAIN_SCHEME = re.compile(r"(?:non-)?persistent://")


class TopicsPatternError(NotAllowedError):
    """The broker will not evaluate this pattern (malformed, too long, or liable to backtrack badly)."""


def topics_hash(topics: Iterable[str]) -> str:
    """Pulsar's hash of a topic list (see the module docstring); independent of the order given."""
    data = ",".join(sorted(topics)).encode()
    return crc32c(data).to_bytes(4, "little").hex()


def parse_namespace(namespace: str) -> tuple[str, str]:
    """``tenant/namespace`` from a client, checked as topic names are; InvalidTopicNameError otherwise."""
    parts = namespace.split("/")
    if len(parts) != 2 or not all(parts):
        raise InvalidTopicNameError(f"invalid namespace {namespace!r}: expected tenant/namespace")
    try:
        TopicName.parse(f"persistent://{namespace}/t")
    except _BadTopicName as exc:
        raise InvalidTopicNameError(f"invalid namespace {namespace!r}: {exc}") from None
    return parts[0], parts[1]


def match_name(topic: str) -> str:
    """What a pattern is matched against: the name without domain scheme and partition suffix."""
    name = TopicName.parse(topic)
    base = name.base if name.is_partition else name
    return f"{base.namespace}/{base.local_name}"


class TopicPattern:
    """A client's topics pattern, compiled for matching topic names (see the module docstring)."""

    def __init__(self, pattern: str, compiled: "re.Pattern[str]") -> None:
        self.pattern = pattern
        self._compiled = compiled

    def __repr__(self) -> str:
        return f"TopicPattern({self.pattern!r})"

    def matches(self, topic: str) -> bool:
        try:
            return self._compiled.fullmatch(match_name(topic)) is not None
        except _BadTopicName:
            return False

    def filter(self, topics: Iterable[str]) -> list[str]:
        """The matching topics, in the order given."""
        return [t for t in topics if self.matches(t)]


def compile_topics_pattern(pattern: str, *, max_length: int = PATTERN_MAX_LENGTH_DEFAULT) -> TopicPattern:
    """The pattern ready to match, or TopicsPatternError saying why the broker will not evaluate it. Clients
    poll with the same pattern over and over: the answer for a pattern is remembered."""
    return _compile(pattern, max_length)


@functools.lru_cache(maxsize=1024)
def _compile(pattern: str, max_length: int) -> TopicPattern:
    if not pattern:
        raise TopicsPatternError("the topics pattern is empty")
    if len(pattern) > max_length:
        raise TopicsPatternError(f"the topics pattern is {len(pattern)} characters long; this broker evaluates "
                                 f"patterns of at most {max_length}")
    without_scheme = _DOMAIN_SCHEME.sub("", pattern)
    try:
        compiled = re.compile(without_scheme)
    except (re.error, RecursionError, OverflowError) as exc:
        raise TopicsPatternError(f"the topics pattern {pattern!r} is not a valid regular expression: {exc}") from None
    reason = _backtracking_risk(without_scheme)
    if reason is not None:
        raise TopicsPatternError(f"the topics pattern {pattern!r} is not evaluated by this broker: {reason}")
    return TopicPattern(pattern, compiled)


def try_compile_topics_pattern(pattern: str, *, max_length: int = PATTERN_MAX_LENGTH_DEFAULT
                               ) -> Optional[TopicPattern]:
    """Like :func:`compile_topics_pattern`, None instead of the error (a poll then answers unfiltered)."""
    try:
        return compile_topics_pattern(pattern, max_length=max_length)
    except TopicsPatternError:
        return None


def namespace_topic_names(tenant: str, namespace: str, domain: str, *, managed_ledgers: Iterable[str] = (),
                          partitioned: Optional[dict[str, int]] = None) -> set[str]:
    """A namespace's topics in ``domain`` as brokers list them: every stored managed ledger (names in path form,
    ``tenant/ns/persistent/encoded-topic``; unparsable ones are skipped) and every partition of each
    partitioned topic (local name -> partition count), whether or not its storage exists yet."""
    names: set[str] = set()
    for path in managed_ledgers:
        try:
            names.add(str(TopicName.from_path(path)))
        except _BadTopicName:
            continue
    for local, count in (partitioned or {}).items():
        try:
            base = TopicName.parse(f"{domain}://{tenant}/{namespace}/{local}")
        except _BadTopicName:
            continue
        names.update(base.partition_name(i) for i in range(count))
    return names


def diff(old: Iterable[str], new: Iterable[str]) -> tuple[list[str], list[str]]:
    """(added, removed), each sorted."""
    before, after = set(old), set(new)
    return sorted(after - before), sorted(before - after)


# ------------------------------------------------------------------------------------------ backtracking risk


def _backtracking_risk(pattern: str) -> Optional[str]:
    """Why matching ``pattern`` might take exponential (or high polynomial) time, or None."""
    if _sre_parser is None:  # pragma: no cover
        return None
    try:
        parsed = _sre_parser.parse(pattern)
    except Exception:  # compiled fine above; a parser change must not refuse every pattern
        return None
    unbounded = [0]
    reason = _walk(list(parsed), inside_repeat=False, unbounded=unbounded)
    if reason is None and unbounded[0] > _UNBOUNDED_REPEATS_MAX:
        reason = f"more than {_UNBOUNDED_REPEATS_MAX} unbounded repetitions"
    return reason


def _walk(items, *, inside_repeat: bool, unbounded: list[int]) -> Optional[str]:
    c = _sre
    for op, av in items:
        if op in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", None)):
            _low, high, sub = av
            if high > 1 and inside_repeat:
                return "a repetition inside a repetition"
            if high > _UNBOUNDED_FROM:
                unbounded[0] += 1
            reason = _walk(list(sub), inside_repeat=inside_repeat or high > 1, unbounded=unbounded)
        elif op is c.BRANCH:
            if inside_repeat:
                return "an alternation inside a repetition"
            reason = None
            for branch in av[1]:
                reason = reason or _walk(list(branch), inside_repeat=inside_repeat, unbounded=unbounded)
        elif op in (c.GROUPREF, c.GROUPREF_EXISTS):
            return "a back-reference"
        elif op is c.SUBPATTERN:
            reason = _walk(list(av[-1]), inside_repeat=inside_repeat, unbounded=unbounded)
        elif op in (c.ASSERT, c.ASSERT_NOT):
            reason = _walk(list(av[1]), inside_repeat=inside_repeat, unbounded=unbounded)
        elif op is getattr(c, "ATOMIC_GROUP", None):
            reason = _walk(list(av), inside_repeat=inside_repeat, unbounded=unbounded)
        else:
            reason = None
        if reason is not None:
            return reason
    return None
