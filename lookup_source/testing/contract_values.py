"""The contract's value tests, a mixin of :class:`.contract.ConnectorContract`: found, missing
and null keys; every type; composite keys; batch limits; one-to-many matches; the client
answering alone. Its fixtures (``contract_store``, ``users``) are the contract's."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Mapping
from typing import Any, ClassVar

import pyarrow as pa
import pytest

from lookup_source.connector_api import LookupClient
from lookup_source.errors import LookupFailedError
from lookup_source.testing.contract_harness import _ask, _config, lookup_rows
from lookup_source.testing.contract_store import ContractStore, user


class ValuesContract:
    """The contract's checks of what a lookup answers (not collected alone: no ``Test``)."""

    schema: ClassVar[str]
    composite_schema: ClassVar[str]

    def test_found_missing_and_null_keys(
        self, contract_store: ContractStore, users: dict[int, dict[str, Any]]
    ) -> None:
        keys = [3, 999_999, None, 3, 40, -1]
        rows = lookup_rows(contract_store.options(), self.schema, keys)
        nothing = dict.fromkeys(users[3])
        assert rows == [
            {"id": 3, **users[3]},
            {"id": 999_999, **nothing},
            {"id": None, **nothing},
            {"id": 3, **users[3]},
            {"id": 40, **users[40]},
            {"id": -1, **nothing},
        ]

    def test_every_type_and_null_values(self, contract_store: ContractStore) -> None:
        full = user(7)
        empty: dict[str, Any] = {"name": "", "score": 0.0, "visits": 0, "active": False}
        empty |= {"born": dt.date(1, 1, 1), "tags": []}
        extreme = {"name": "é\u00a0😀" * 50, "score": -1.5e300, "visits": -(2**63)}
        extreme |= {"active": True, "born": dt.date(9999, 12, 31), "tags": ["", "x" * 1000]}
        nulls = dict.fromkeys(full)
        records = {1: full, 2: empty, 3: extreme, 4: nulls, 5: {**full, "tags": None}}
        contract_store.put({k: [v] for k, v in records.items()})
        rows = lookup_rows(contract_store.options(), self.schema, list(records))
        assert rows == [{"id": k, **v} for k, v in records.items()]

    def test_composite_keys(self, contract_store: ContractStore) -> None:
        if not contract_store.supports_composite:
            pytest.skip("this store looks up single keys only")
        records = {("acme", 1): user(1), ("acme", 2): user(2), ("beta", 1): user(3)}
        contract_store.put({k: [v] for k, v in records.items()})
        options = {**contract_store.options(composite=True), "key.column": "tenant,id"}
        keys = [("beta", 1), ("acme", 1), ("acme", 3), ("gamma", 2), ("acme", 2)]
        rows = lookup_rows(options, self.composite_schema, keys)
        nothing = dict.fromkeys(user(1))
        expected = [records.get(k, nothing) for k in keys]
        assert rows == [{"tenant": k[0], "id": k[1], **v} for k, v in zip(keys, expected)]

    def test_batch_size_bounds_every_request(
        self, contract_store: ContractStore, users: dict[int, dict[str, Any]]
    ) -> None:
        sizes: list[int] = []
        client_class, _ = _config(contract_store.options(), self.schema)

        overrides_arrow = client_class.lookup_arrow is not LookupClient.lookup_arrow
        own_columnar = client_class.columnar is not LookupClient.columnar

        class Counting(client_class):  # type: ignore[valid-type, misc]
            """The connector, counting the keys of each request it is asked."""

            @property
            def columnar(self) -> bool:  # as the connector itself answers it
                if own_columnar:
                    return bool(client_class.columnar.fget(self))  # type: ignore[attr-defined]
                return overrides_arrow

            async def lookup(self, keys: Any) -> Any:
                if not self.columnar:
                    sizes.append(len(keys))
                return await super().lookup(keys)

            async def lookup_arrow(self, keys: pa.RecordBatch) -> Any:
                if self.columnar:
                    sizes.append(keys.num_rows)
                return await super().lookup_arrow(keys)

        keys = list(range(1, 41)) * 2 + list(range(1000, 1030))
        limit = min(7, contract_store.max_batch_size or 7)
        options = {**contract_store.options(), "batch.size": str(limit)}
        rows = lookup_rows(options, self.schema, keys, client_factory=Counting)
        assert [r["name"] for r in rows] == [users[k]["name"] if k in users else None for k in keys]
        assert sizes and max(sizes) <= limit
        assert sum(sizes) == 70, sizes  # every distinct key asked once

    def test_several_matches_for_one_key(self, contract_store: ContractStore) -> None:
        if not contract_store.supports_one_to_many:
            pytest.skip("this store holds one record per key")
        contract_store.put({1: [user(1), user(2), user(3)], 2: [user(4)]})
        keys = [2, 1, 77]
        left = lookup_rows(contract_store.options(), self.schema, keys)
        inner = lookup_rows(contract_store.options(), self.schema, keys, how="inner")
        many = sorted((r for r in left if r["id"] == 1), key=lambda r: r["name"])
        assert many == [{"id": 1, **user(i)} for i in (1, 2, 3)]
        assert [r["id"] for r in left] == [2, 1, 1, 1, 77]
        assert left[0] == {"id": 2, **user(4)} and left[-1] == {"id": 77, **dict.fromkeys(user(1))}
        assert [r["id"] for r in inner] == [2, 1, 1, 1]
        # the guard: a key with more matches than lookup.max-matches is an error naming it
        guarded = {**contract_store.options(), "lookup.max-matches": "2"}
        with pytest.raises(LookupFailedError, match=r"key 1: 3 matches, more than lookup\.max"):
            lookup_rows(guarded, self.schema, keys)
        kept = lookup_rows({**guarded, "on.error": "null"}, self.schema, keys)
        assert kept == [
            {"id": 2, **user(4)},
            *[{"id": k, **dict.fromkeys(user(1))} for k in (1, 77)],
        ]

    def test_the_client_answers_directly(
        self, contract_store: ContractStore, users: dict[int, dict[str, Any]]
    ) -> None:
        """The client alone (no engine): open, ask, close; the answer holds the found keys."""
        client_class, config = _config(contract_store.options(), self.schema)
        keys = pa.RecordBatch.from_arrays([pa.array([5, 6, 424_242], pa.int64())], names=["id"])

        async def run() -> dict[Any, Any]:
            client = client_class(config)
            await client.open()
            try:
                return await _ask(client, keys)
            finally:
                await client.close()

        answer = asyncio.run(run())
        assert set(answer) == {5, 6}
        found = answer[5]
        assert isinstance(found, (Mapping, list)), f"key 5 answered {found!r}"
        record = found[0] if isinstance(found, list) else found  # the record form may list
        assert record["name"] == users[5]["name"]
