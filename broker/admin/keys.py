"""Typed keys of the aiohttp application (kept apart so every route module can import them)."""

from __future__ import annotations

from aiohttp import web

from .context import AdminContext

CONTEXT = web.AppKey("magnetar_admin_context", AdminContext)
