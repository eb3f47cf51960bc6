"""The broker's admin REST API (Pulsar's ``/admin/v2`` paths and JSON names) and its HTTP application.

Public face: :func:`make_app` builds the aiohttp application from an :class:`AdminContext`; route modules
(``clusters``, ``tenants``, ``namespaces``, ``topics``, ``cluster_info``) each hold one ``routes`` table.
Errors leave as ``{"reason": ...}`` with Pulsar's status codes (``errors.py``).
"""

from .app import make_app
from .context import AdminContext
from .errors import RestError

__all__ = ["AdminContext", "RestError", "make_app"]
