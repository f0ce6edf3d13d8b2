"""Connectors: the clients that talk to a store, behind one small interface."""

from lookup_source.connector_api import ConnectorConfig, Key, LookupClient, Record
from lookup_source.connectors.registry import ENTRY_POINT_GROUP, resolve_connector

__all__ = [
    "ENTRY_POINT_GROUP",
    "ConnectorConfig",
    "Key",
    "LookupClient",
    "Record",
    "resolve_connector",
]
