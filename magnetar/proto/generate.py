"""Regenerates the committed gRPC stubs from ``bookie.proto``.

Run ``python -m magnetar.proto.generate`` (or ``make proto``) after editing the ``.proto``; a unit test
regenerates into a temporary folder and fails when the committed stubs differ.
"""

from __future__ import annotations

import pathlib
import sys

PROTO_DIR = pathlib.Path(__file__).resolve().parent
PROTOS = ("bookie.proto",)


def generate(out_dir: pathlib.Path) -> None:
    """Writes ``*_pb2.py``, ``*_pb2.pyi`` and ``*_pb2_grpc.py`` for every proto into ``out_dir``."""
    from grpc_tools import protoc  # imported lazily: grpcio-tools is a test/dev dependency only

    out_dir.mkdir(parents=True, exist_ok=True)
    for proto in PROTOS:
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            str(PROTO_DIR / proto),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed for {proto}")
        # protoc writes `import bookie_pb2`; inside the package it must be relative.
        grpc_file = out_dir / proto.replace(".proto", "_pb2_grpc.py")
        module = proto.replace(".proto", "_pb2")
        text = grpc_file.read_text()
        text = text.replace(f"import {module} as", f"from . import {module} as")
        grpc_file.write_text(text)


def main() -> int:
    generate(PROTO_DIR)
    print(f"regenerated stubs in {PROTO_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
