"""Find a connector class by name: built-ins, entry points, or ``package.module:Class``."""

from __future__ import annotations

import difflib
import importlib
from importlib.metadata import entry_points

from lookup_source.connector_api import LookupClient
from lookup_source.errors import ConnectorNotFoundError

ENTRY_POINT_GROUP = "asynclookup.connectors"
"""The entry-point group through which third-party packages ship connectors."""

BUILTIN_CONNECTORS: dict[str, tuple[str, str]] = {
    # name: (module:Class, the extra that installs its client library)
    "redis": ("lookup_source.connectors.redis_client:RedisLookupClient", "redis"),
    "http": ("lookup_source.connectors.http_client:HttpLookupClient", "http"),
    "postgres": ("lookup_source.connectors.postgres_client:PostgresLookupClient", "postgres"),
}
_EXTRA_LIBRARIES = {"redis": "redis", "http": "aiohttp", "postgres": "asyncpg"}


def _load(target: str, *, what: str, extra: str | None = None) -> type[LookupClient]:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ConnectorNotFoundError(f"'{target}' is not of the form package.module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing = (getattr(exc, "name", None) or "").split(".")[0]
        hint = (
            f"; install it with pip install 'asynclookup[{extra}]'"
            if extra and missing == _EXTRA_LIBRARIES.get(extra)
            else ""
        )
        raise ConnectorNotFoundError(f"cannot load {what}: {exc}{hint}") from exc
    try:
        obj = module
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        raise ConnectorNotFoundError(
            f"cannot load {what}: module '{module_name}' has no attribute '{attribute}'"
        ) from None
    if not (isinstance(obj, type) and issubclass(obj, LookupClient)):
        raise ConnectorNotFoundError(
            f"{what} ('{target}') is not a subclass of lookup_source.connectors.LookupClient"
        )
    return obj


def _entry_points() -> dict[str, str]:
    return {ep.name.lower(): ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available_connectors() -> list[str]:
    """Names accepted by the ``connector`` option (built-ins and installed entry points)."""
    return sorted(set(BUILTIN_CONNECTORS) | set(_entry_points()))


def resolve_connector(name: str) -> type[LookupClient]:
    """Return the connector class that ``name`` selects.

    >>> resolve_connector("redis").__name__
    'RedisLookupClient'
    """
    if ":" in name:
        return _load(name, what=f"connector class '{name}'")
    key = name.lower()
    if key in BUILTIN_CONNECTORS:
        target, extra = BUILTIN_CONNECTORS[key]
        return _load(target, what=f"the {key} connector", extra=extra)
    installed = _entry_points()
    if key in installed:
        return _load(installed[key], what=f"connector '{key}' (entry point {ENTRY_POINT_GROUP})")
    names = available_connectors()
    near = difflib.get_close_matches(key, names, n=1)
    raise ConnectorNotFoundError(
        f"unknown connector '{name}': use one of {', '.join(names)}, an entry point of group "
        f"'{ENTRY_POINT_GROUP}', or package.module:Class",
        suggestion=near[0] if near else None,
    )
