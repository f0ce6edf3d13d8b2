"""The HTTP connector's tests, against real aiohttp servers.

Every test collected here carries the ``connector`` marker:
``pytest -m "not connector"`` skips them.

Every test runs on each transport the connector has (``http.client``): aiohttp and, where it
is installed (Python 3.11+), the native one (pyreqwest). Each property of the connector — the
URL, redirects, a bounded body, cookies, TLS, errors — is shown on both.
"""

from collections.abc import Iterator
from typing import Any

import pytest
from asynclookup_http import native_transport, options

TRANSPORTS = ["aiohttp", "pyreqwest"]


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.connector)


@pytest.fixture(params=TRANSPORTS, autouse=True)
def transport(request: pytest.FixtureRequest) -> Iterator[str]:
    """The transport every lookup of the test uses unless it names one (``http.client``'s
    default, for the test)."""
    name: str = request.param
    if name == "pyreqwest" and native_transport.available() is not None:
        pytest.skip(f"the native transport: {native_transport.available()}")
    spec: Any = options.CLIENT
    default = spec.default
    object.__setattr__(spec, "default", name)
    try:
        yield name
    finally:
        object.__setattr__(spec, "default", default)
