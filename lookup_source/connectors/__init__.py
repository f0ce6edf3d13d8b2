"""The built-in connectors: Redis, HTTP and Postgres, each built on the public connector API
(:mod:`lookup_source.connector_api`) and registered through the ``asynclookup.connectors``
entry point, exactly as a third-party connector is."""
