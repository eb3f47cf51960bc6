"""Request/response versions aiokafka 0.14 does not define, built from its ``Schema`` types as the Kafka
protocol specification lays them out. Only what the listener serves: ApiVersions v3 (flexible).
"""

from __future__ import annotations

from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.types import CompactArray, CompactString, Int16, Int32, Schema, TaggedFields


class ApiVersionResponse_v3(Response):
    API_KEY = 18
    API_VERSION = 3
    SCHEMA = Schema(
        ("error_code", Int16),
        ("api_versions", CompactArray(("api_key", Int16), ("min_version", Int16), ("max_version", Int16),
                                      ("tags", TaggedFields))),
        ("throttle_time_ms", Int32),
        ("tags", TaggedFields),
    )


class ApiVersionRequest_v3(RequestStruct):
    API_KEY = 18
    API_VERSION = 3
    FLEXIBLE_VERSION = True
    RESPONSE_TYPE = ApiVersionResponse_v3
    SCHEMA = Schema(
        ("client_software_name", CompactString("utf-8")),
        ("client_software_version", CompactString("utf-8")),
        ("tags", TaggedFields),
    )


REQUESTS = (ApiVersionRequest_v3,)
