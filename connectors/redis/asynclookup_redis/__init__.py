"""The Redis connector of asynclookup: ``connector=redis``.

Installed by ``pip install "asynclookup[redis]"`` and registered through the
``asynclookup.connectors`` entry point, exactly as a third-party connector is; built only on
:mod:`lookup_source.connector_api`. Its options are in the asynclookup README.
"""

from asynclookup_redis.client import RedisLookupClient, classify

__version__ = "0.3.0"

__all__ = ["RedisLookupClient", "__version__", "classify"]
