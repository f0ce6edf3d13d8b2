"""The HTTP connector of asynclookup: ``connector=http``.

Installed by ``pip install "asynclookup[http]"`` and registered through the
``asynclookup.connectors`` entry point, exactly as a third-party connector is; built only on
:mod:`lookup_source.connector_api`. Its options are in the asynclookup README.
"""

from asynclookup_http.client import HttpLookupClient, classify

__version__ = "0.3.0"

__all__ = ["HttpLookupClient", "__version__", "classify"]
