"""The Postgres connector of asynclookup: ``connector=postgres``.

Installed by ``pip install "asynclookup[postgres]"`` and registered through the
``asynclookup.connectors`` entry point, exactly as a third-party connector is; built only on
:mod:`lookup_source.connector_api`. Its options are in the asynclookup README.
"""

from asynclookup_postgres.client import PostgresLookupClient, classify

__version__ = "0.3.0"

__all__ = ["PostgresLookupClient", "__version__", "classify"]
