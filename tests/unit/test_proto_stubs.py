"""The committed gRPC stubs are exactly what the committed .proto generates."""

import pathlib

from magnetar.proto import generate


def test_committed_stubs_match_proto(tmp_path: pathlib.Path) -> None:
    generate.generate(tmp_path)
    for name in ("bookie_pb2.py", "bookie_pb2.pyi", "bookie_pb2_grpc.py"):
        committed = (generate.PROTO_DIR / name).read_text()
        fresh = (tmp_path / name).read_text()
        assert fresh == committed, f"{name} is stale: run `make proto` and commit the result"
