"""The options every surface accepts, parsed once into a typed, validated :class:`LookupOptions`
(the public name of :mod:`lookup_source.settings`, where they are declared).

Options are strings (Spark hands them over as a case-insensitive map of strings). The same names
work for ``spark.read.format("asynclookup").options(...)``, :func:`lookup_join` and
``CREATE TABLE ... USING asynclookup OPTIONS (...)``. Connector-specific options are prefixed by
the connector's name (``redis.key.pattern``) and declared by the connector class itself.

>>> opts = parse_options({"connector": "redis", "url": "redis://localhost:6379", "capacity": "50"})
>>> opts.capacity, opts.output_mode, opts.on_error
(50, 'ordered', 'fail')
"""

from lookup_source.settings import *  # noqa: F403
from lookup_source.settings import __all__ as __all__
