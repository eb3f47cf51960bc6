"""The broker service's rooms import one way: session -> topics -> policies.

Read from the source (every import, also inside functions and ``TYPE_CHECKING`` blocks), so a lazy import
cannot hide a dependency. Topic and policy code gets plain values from the session room (``topics/model.py``)
and entry metadata from ``magnetar.protocol.metadata``; it never sees a protocol command, the generated
protobuf module, a connection or an asyncio stream.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

SERVICE = pathlib.Path(__file__).resolve().parents[2] / "broker" / "service"
FORBIDDEN_MODULES = ("magnetar.protocol.pulsar_api_pb2",)


def _modules(room: str) -> list[pathlib.Path]:
    return sorted((SERVICE / room).rglob("*.py"))


def _package_of(path: pathlib.Path) -> list[str]:
    rel = path.relative_to(SERVICE.parents[1]).with_suffix("")
    return list(rel.parts[:-1])


def imports_of(path: pathlib.Path) -> list[tuple[str, str]]:
    """``(module, name)`` for every ``import``/``from ... import`` in the file (relative ones resolved);
    ``name`` is "" for a plain ``import``. Attribute uses of ``asyncio.Stream*`` count as imports too."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _package_of(path)
    found: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, "") for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.extend((module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "asyncio" \
                and node.attr.startswith("Stream"):
            found.append(("asyncio", node.attr))
    return found


def violations(room: str, forbidden_rooms: tuple[str, ...]) -> list[str]:
    out = []
    for path in _modules(room):
        for module, name in imports_of(path):
            full = f"{module}.{name}" if name else module
            where = f"{path.relative_to(SERVICE)}: {full}"
            if any(full == f"broker.service.{r}" or full.startswith(f"broker.service.{r}.") for r in forbidden_rooms):
                out.append(where)
            elif any(full == m or full.startswith(m + ".") for m in FORBIDDEN_MODULES):
                out.append(where)
            elif module == "magnetar.protocol" and (name == "pb" or name.startswith("Command")):
                out.append(where)
            elif module == "asyncio" and name.startswith("Stream"):
                out.append(where)
    return out


def test_the_rooms_exist_and_hold_code() -> None:
    for room in ("session", "topics", "policies"):
        assert len(_modules(room)) > 3, room


@pytest.mark.parametrize("room, forbidden", [("topics", ("session",)), ("policies", ("session", "topics"))])
def test_lower_rooms_never_import_the_session_or_the_protocol_commands(room: str, forbidden: tuple[str, ...]) -> None:
    assert violations(room, forbidden) == []


def test_the_check_sees_every_kind_of_import(tmp_path: pathlib.Path) -> None:
    # A fake module placed as if in topics/: each line is one violation the scan must report.
    fake_dir = SERVICE / "topics"
    text = ("from magnetar.protocol import pb\n"
            "from ..session.connection import Connection\n"
            "def f():\n    from magnetar.protocol import CommandSend\n    return asyncio.StreamWriter\n"
            "import magnetar.protocol.pulsar_api_pb2\n")
    path = fake_dir / "_room_check_probe.py"
    path.write_text(text)
    try:
        found = [f"{m}.{n}" if n else m for m, n in imports_of(path)]
    finally:
        path.unlink()
    assert found.count("broker.service.session.connection.Connection") == 1
    assert "magnetar.protocol.pb" in found and "magnetar.protocol.CommandSend" in found
    assert "asyncio.StreamWriter" in found and "magnetar.protocol.pulsar_api_pb2" in found
