"""What a connector's tests give the contract: the :class:`ContractStore` protocol (a real
server the contract writes to) and the data it writes (schemas, :func:`user` records)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from lookup_source.testing.contract_network import _closed_port

KEY_SCHEMA = "id long"
COMPOSITE_KEY_SCHEMA = "tenant string, id long"
VALUE_SCHEMA = (
    "name string, score double, visits long, active boolean, born date, tags array<string>"
)
"""The value columns of the contract's lookups; a store holds them in its own way."""

Record = Mapping[str, Any]


def json_ready(record: Record) -> dict[str, Any]:
    """A record with its dates as ISO text: what a JSON store (Redis, HTTP) holds."""
    return {k: v.isoformat() if isinstance(v, dt.date) else v for k, v in record.items()}


def user(i: int) -> dict[str, Any]:
    """The contract's record for key ``i``: every column set, values that differ per key."""
    return {
        "name": f"user {i} ✓",
        "score": i / 4,
        "visits": i * 1_000_000_007,
        "active": i % 2 == 0,
        "born": dt.date(1970, 1, 1) + dt.timedelta(days=i * 37),
        "tags": [f"t{i % 3}", f"u{i}"],
    }


class ContractStore:
    """What the contract needs from a connector's tests: a real server it can write to."""

    supports_composite: ClassVar[bool] = True
    """Whether ``options(composite=True)`` looks up (tenant, id) keys."""
    supports_one_to_many: ClassVar[bool] = False
    """Whether ``put`` may give a key several records, each a match."""
    max_batch_size: ClassVar[int | None] = None
    """The most keys one request of the connector may carry, if it has a limit."""

    def options(self, *, composite: bool = False) -> dict[str, str]:
        """Options (``connector``, ``url``, the connector's own) that look up what ``put``
        wrote, for the key columns ``id`` (or ``tenant, id`` when ``composite``)."""
        raise NotImplementedError

    def options_at(self, host: str, port: int) -> dict[str, str] | None:
        """The same lookup, pointed at another server address; None for a store that is not
        reached over the network (its hang test is skipped)."""
        return None

    def unreachable_options(self) -> dict[str, str] | None:
        """Options for a store that is down. By default ``options_at`` a closed port."""
        return self.options_at("127.0.0.1", _closed_port())

    def put(self, records: Mapping[Any, Sequence[Record]]) -> None:
        """Store ``records``: key (an int, or a (tenant, id) tuple) -> its records (one, or
        several when ``supports_one_to_many``), values typed as :func:`user` makes them."""
        raise NotImplementedError

    def refused_options(self) -> dict[str, str] | None:
        """Options the server refuses for good (a wrong password, an unknown table), or None."""
        return None

    def server_address(self) -> tuple[str, int] | None:
        """The server's (host, port), to count the connections left open; None to skip."""
        return None
