"""Regenerates the committed Python module from ``pulsar_api.proto``.

Run ``python -m magnetar.protocol.generate`` after editing the ``.proto``; a unit test regenerates into a
temporary folder and fails when the committed ``pulsar_api_pb2.py`` / ``.pyi`` differ.
"""

from __future__ import annotations

import keyword
import pathlib
import re
import sys

PROTO_DIR = pathlib.Path(__file__).resolve().parent
PROTOS = ("pulsar_api.proto",)
GENERATED = ("pulsar_api_pb2.py", "pulsar_api_pb2.pyi")


def generate(out_dir: pathlib.Path) -> None:
    """Writes ``*_pb2.py`` and ``*_pb2.pyi`` for every proto into ``out_dir`` (no gRPC services here)."""
    from grpc_tools import protoc  # imported lazily: grpcio-tools is a test/dev dependency only

    out_dir.mkdir(parents=True, exist_ok=True)
    for proto in PROTOS:
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            str(PROTO_DIR / proto),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed for {proto}")
        _fix_stub(out_dir / proto.replace(".proto", "_pb2.pyi"))


_ANNOTATION = re.compile(r"^(\s*)([A-Za-z_]\w*):")


def _fix_stub(path: pathlib.Path) -> None:
    """Comments out stub lines that annotate a Python keyword.

    Pulsar names a schema type ``None``; protoc writes ``None: _ClassVar[...]`` into the ``.pyi``, which is
    not valid Python. At run time the value is reached with ``Schema.Type.Value("None")``.
    """
    lines = path.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        match = _ANNOTATION.match(line)
        if match and keyword.iskeyword(match.group(2)):
            lines[i] = f"{match.group(1)}# {line.lstrip()}"
    path.write_text("".join(lines))


def main() -> int:
    generate(PROTO_DIR)
    print(f"regenerated {', '.join(GENERATED)} in {PROTO_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
