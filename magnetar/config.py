"""Settings from TOML: the one loader every process kind (bookie, broker, proxy ...) uses.

Theory of operation. Each server's settings are one typed, documented, frozen dataclass that inherits
:class:`TomlSettings` and names its ``kind``. A TOML file is one flat table mapped onto that dataclass key
by field:

* the field's annotation is the type check (``int``, ``float``, ``bool``, ``str``, ``pathlib.Path``, and
  ``list``/``tuple`` of those): ``true`` is not an integer, ``"6650"`` is not a port, an integer is a fine
  ``float``;
* a key that names no field is an error (a typo must not silently fall back to a default), with the
  nearest known spellings as a hint;
* a missing key takes the field's default; a field without a default is required;
* the dataclass checks consistency itself (``__post_init__``, raising :class:`~magnetar.errors.ConfigError`
  naming the setting); the loader prefixes every error with the file, so a message reads
  ``/etc/magnetar/broker.toml: port must be in 0..65535, not 70000``;
* a relative ``pathlib.Path`` setting (``data_dir``) is taken relative to the file's folder.

Units. Every quantity carries its unit as the last word of its name: durations ``_ms`` (integer
milliseconds) or ``_s`` (seconds), sizes ``_bytes``. There is no other spelling of a duration (no
``"10s"`` strings, no unit-less ``timeout``); a type error names the unit the value is counted in.
Settings of inner rooms may count the same duration in another unit (the broker's
``compaction_monitor_interval_ms`` is the service's ``compaction_monitor_interval_s``): :func:`derive`
builds such settings from a server's settings by field name, converting between ``_ms`` and ``_s``, so a
setting added to both flows without copying code.

Shared settings. What several servers' settings have in common is a keyword-only dataclass mixin they all
inherit, so its keys, defaults and checks exist once: :class:`RegionServerSettings` here (``data_dir``,
``zookeeper``, ``cluster``, listen addresses of a broker or proxy), ``magnetar.auth.settings.SecuritySettings``
(TLS, authentication, authorization).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import pathlib
import re
import tomllib
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Optional, TypeVar

from magnetar.errors import ConfigError

__all__ = ["RegionServerSettings", "TomlSettings", "check_name", "check_ports", "derive", "duration_unit",
           "from_mapping", "load", "read_toml", "typed_value"]

T = TypeVar("T")

# Milliseconds per unit of each duration suffix; a name ending in one of these counts a duration.
DURATION_UNITS: Mapping[str, int] = {"_ms": 1, "_s": 1000}
_UNIT_WORDS = {"_ms": "milliseconds", "_s": "seconds", "_bytes": "bytes"}
_NAME_RE = re.compile(r"[A-Za-z0-9_.\-=:]+")
_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
          pathlib.Path: "a path (string)"}


class TomlSettings:
    """Mixin of a settings dataclass loaded from TOML: ``load(path)`` and ``from_mapping(values)``.

    A subclass sets ``kind`` (``"bookie"``, ``"broker"``...), which names it in error messages.
    """

    kind: ClassVar[str] = "server"

    @classmethod
    def from_mapping(cls: type[T], values: Mapping[str, Any], *, source: str = "config") -> T:
        """Builds the settings from parsed TOML (or a dict), checking names and types."""
        return from_mapping(cls, values, source=source, kind=cls.kind)  # type: ignore[attr-defined]

    @classmethod
    def load(cls: type[T], path: pathlib.Path | str) -> T:
        """Reads a TOML file; relative paths in it are taken relative to the file's folder."""
        return load(cls, path, kind=cls.kind)  # type: ignore[attr-defined]


@dataclass(frozen=True, kw_only=True)
class RegionServerSettings:
    """Mixin of the settings of a server of a region that ZooKeeper knows (a broker, a proxy): where it keeps its
    files, which ZooKeeper and configuration store it reads, which region it serves, where it listens.

    Fields are keyword-only, so a server's own fields may follow. ``__post_init__`` makes ``data_dir`` a path and
    calls the server's ``validate()``, which calls :meth:`validate_region_server`.

    Attributes:
        data_dir: holds ``endpoints.json`` (the bound addresses, written once the server serves).
        zookeeper: the region's ZooKeeper (``host:port[,host:port]/chroot``).
        configuration_store: the global configuration store; empty means the same ZooKeeper as ``zookeeper``.
        cluster: the region (Pulsar: cluster) the server serves.
        bind_host: the address the server's listeners bind.
        advertised_host: the host the server is reached at.
    """

    data_dir: pathlib.Path
    zookeeper: str
    configuration_store: str = ""
    cluster: str = "standalone"
    bind_host: str = "127.0.0.1"
    advertised_host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", pathlib.Path(self.data_dir))
        self.validate()

    def validate(self) -> None:
        """Raises ConfigError naming the first inconsistent setting (a server adds its own checks)."""
        self.validate_region_server()

    @property
    def endpoints_path(self) -> pathlib.Path:
        return self.data_dir / "endpoints.json"

    @property
    def configuration_store_connect(self) -> str:
        """The global store's connect string (the region's ZooKeeper when none is configured)."""
        return self.configuration_store or self.zookeeper

    def validate_region_server(self) -> None:
        """Raises ConfigError naming the first of these settings that cannot work."""
        if str(self.data_dir) in ("", "."):
            raise ConfigError("data_dir must not be empty")
        if not self.zookeeper.strip():
            raise ConfigError("zookeeper must name the region's ZooKeeper (host:port[/chroot])")
        for name in ("zookeeper", "configuration_store"):
            if any(c.isspace() for c in getattr(self, name)):
                raise ConfigError(f"{name} must not contain spaces: {getattr(self, name)!r}")
        check_name("cluster", self.cluster)
        for name in ("bind_host", "advertised_host"):
            value = getattr(self, name)
            if not value or any(c.isspace() for c in value) or "/" in value:
                raise ConfigError(f"{name} is not a host name or address: {value!r}")


def check_name(key: str, value: str) -> None:
    """ConfigError unless ``value`` is a name ZooKeeper paths and URLs take as it is (a cluster, a broker id)."""
    if not _NAME_RE.fullmatch(value):
        raise ConfigError(f"{key} {value!r} is not a valid name (letters, digits, '-_.=:')")


def check_ports(settings: Any, names: tuple[str, ...], *, zero: str = "") -> None:
    """ConfigError unless each port setting ``names`` of ``settings`` is in 0..65535 and those not 0 differ.

    ``zero`` says what 0 means, in the message (``" (0: not served)"``).
    """
    for name in names:
        value = getattr(settings, name)
        if not 0 <= value <= 65535:
            raise ConfigError(f"{name} must be in 0..65535{zero}, not {value}")
    seen: dict[int, str] = {}
    for name in names:
        value = getattr(settings, name)
        if value and value in seen:
            raise ConfigError(f"{seen[value]} and {name} must differ (both {value})")
        if value:
            seen[value] = name


# -- loading ------------------------------------------------------------------------------------------------


def read_toml(path: pathlib.Path | str) -> dict[str, Any]:
    """The parsed file; ConfigError naming the file when it is missing, unreadable or not TOML."""
    path = pathlib.Path(path)
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None


def load(cls: type[T], path: pathlib.Path | str, *, kind: str = "server") -> T:
    """Reads settings dataclass ``cls`` from a TOML file (see the module docstring)."""
    path = pathlib.Path(path)
    values = read_toml(path)
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        if hints.get(name) is pathlib.Path and isinstance(value, str):
            if not pathlib.Path(value).is_absolute():
                values[name] = str(path.parent / value)
    return from_mapping(cls, values, source=str(path), kind=kind)


def from_mapping(cls: type[T], values: Mapping[str, Any], *, source: str = "config", kind: str = "server") -> T:
    """Builds settings dataclass ``cls`` from a table: unknown keys, missing required ones and wrong types
    are ConfigErrors naming the key and ``source``, as are the dataclass's own consistency checks."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = [key for key in values if key not in fields]
    if unknown:
        raise ConfigError(f"{source}: unknown {kind} setting(s) {', '.join(sorted(unknown))} "
                          f"({_hint(unknown, fields)})")
    for name, f in fields.items():
        if name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{source}: {name} is required")
    hints = typing.get_type_hints(cls)
    kwargs = {name: typed_value(hints[name], value, key=name, source=source) for name, value in values.items()}
    try:
        return cls(**kwargs)
    except ConfigError as err:
        raise ConfigError(f"{source}: {err}") from None


def _hint(unknown: list[str], fields: Mapping[str, Any]) -> str:
    guesses = {key: " or ".join(close) for key in sorted(unknown)
               if (close := difflib.get_close_matches(key, list(fields), n=2, cutoff=0.75))}
    if len(unknown) == 1 and guesses:
        return f"did you mean {guesses[unknown[0]]}?"
    if guesses:
        return "did you mean " + ", ".join(f"{close} for {key}" for key, close in guesses.items()) + "?"
    return f"known: {', '.join(sorted(fields))}"


def typed_value(hint: Any, value: Any, *, key: str, source: str = "") -> Any:
    """``value`` checked against annotation ``hint`` (ints widened to float, strings to paths, arrays to
    tuples where annotated so); ConfigError ``"<source>: <key> must be <kind>, not <value>"`` otherwise."""
    origin = typing.get_origin(hint)
    if origin in (list, tuple):
        args = typing.get_args(hint)
        item = args[0] if args else Any
        if not isinstance(value, list):
            raise _type_error(key, "an array", value, source)
        items = [typed_value(item, v, key=f"{key}[{i}]", source=source) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if hint is Any:
        return value
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        value = float(value) if ok else value
    elif hint is str:
        ok = isinstance(value, str)
    elif hint is pathlib.Path:
        ok = isinstance(value, (str, pathlib.Path))
        value = pathlib.Path(value) if ok else value
    else:
        raise TypeError(f"setting {key} has an unsupported type {hint!r}")  # a bug in the settings class
    if not ok:
        raise _type_error(key, _kind(hint), value, source)
    return value


def _kind(hint: Any) -> str:
    return _KINDS.get(hint, getattr(hint, "__name__", str(hint)))


def _type_error(key: str, expected: str, value: Any, source: str) -> ConfigError:
    unit = next((word for suffix, word in _UNIT_WORDS.items() if key.endswith(suffix)), "")
    expected = f"{expected} ({unit})" if unit else expected
    prefix = f"{source}: " if source else ""
    return ConfigError(f"{prefix}{key} must be {expected}, not {describe(value)}")


def describe(value: Any) -> str:
    """A TOML value as a person reads it: ``a string ("three")``, ``an integer (5)``, ``a table``."""
    kinds = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
             dict: "a table"}
    kind = kinds.get(type(value), type(value).__name__)
    if isinstance(value, (dict, list)):
        return kind
    if isinstance(value, bool):
        return f"{kind} ({str(value).lower()})"
    return f'{kind} ("{value}")' if isinstance(value, str) else f"{kind} ({value!r})"


# -- derived settings ---------------------------------------------------------------------------------------


def duration_unit(name: str) -> Optional[str]:
    """The duration suffix ``name`` ends with (``"_ms"``, ``"_s"``), or None."""
    return next((suffix for suffix in DURATION_UNITS if name.endswith(suffix) and len(name) > len(suffix)), None)


def derive(cls: type[T], source: Any, *, prefix: str = "", renames: Optional[Mapping[str, str]] = None) -> T:
    """Builds settings dataclass ``cls`` from another settings object (a server's, loaded from TOML).

    Each field of ``cls`` takes, in this order: ``source``'s field named in ``renames`` (target name ->
    source name, for the few that differ); ``source``'s field ``prefix + name``; or the same name counted in
    another duration unit (``..._ms`` for ``..._s``), converted. A field found nowhere keeps its default.
    So a setting added to both classes under the same name flows with no further code.

    Raises:
        TypeError: a rename names a field ``source`` lacks (a bug in the caller, not in a file).
    """
    renames = renames or {}
    available = {f.name for f in dataclasses.fields(source)}
    missing = sorted(set(renames.values()) - available)
    if missing:
        raise TypeError(f"{type(source).__name__} has no setting(s) {', '.join(missing)} to derive from")
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.init:
            continue
        origin = renames.get(f.name) or _counterpart(prefix + f.name, available)
        if origin is not None:
            kwargs[f.name] = _convert(getattr(source, origin), origin, f.name, hints[f.name])
    return cls(**kwargs)


def _counterpart(name: str, available: set[str]) -> Optional[str]:
    if name in available:
        return name
    unit = duration_unit(name)
    if unit is None:
        return None
    stem = name[: -len(unit)]
    return next((stem + other for other in DURATION_UNITS if stem + other in available), None)


def _convert(value: Any, from_name: str, to_name: str, hint: Any) -> Any:
    from_unit, to_unit = duration_unit(from_name), duration_unit(to_name)
    if from_unit and to_unit and from_unit != to_unit and isinstance(value, (int, float)):
        value = value * DURATION_UNITS[from_unit] / DURATION_UNITS[to_unit]
        if hint is int:
            value = round(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    return value
