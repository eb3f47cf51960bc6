"""ApiVersions (18), v0..v3: the API keys and version ranges this broker serves."""

from __future__ import annotations

from typing import Any

from ..codec import ErrorCode
from ..structs import make


async def api_versions(server: Any, request: Any, ctx: Any) -> Any:
    versions = [{"api_key": k, "min_version": lo, "max_version": hi, "tags": {}}
                for k, (lo, hi) in server.supported_versions().items()]
    return make(request.RESPONSE_TYPE, {"error_code": ErrorCode.NONE, "api_versions": versions,
                                        "throttle_time_ms": 0, "tags": {}})


HANDLERS = {18: (0, 3, api_versions)}
