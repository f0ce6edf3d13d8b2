"""The connector contract: the behaviour every connector promises, as one pytest suite.

Every connector, built-in or third-party, runs it against its real server (LangChain's
``standard-tests`` is the model). Subclass :class:`ConnectorContract` in your connector's
tests and give it a ``contract_store`` fixture that returns a :class:`ContractStore` for your
server::

    import pytest

    from lookup_source.testing.contract import ConnectorContract, ContractStore


    class MyStore(ContractStore):
        def options(self, *, composite=False):
            return {"connector": "mystore", "url": self.url, "mystore.table": self.table}

        def options_at(self, host, port):
            return {**self.options(), "url": f"mystore://{host}:{port}"}

        def put(self, records):
            ...  # write each key's records where options() looks them up


    class TestMyStoreContract(ConnectorContract):
        @pytest.fixture
        def contract_store(self, my_server):
            return MyStore(...)

The suite looks keys up through the engine exactly as ``lookup_join`` does (one Spark task's
worth, no JVM) and checks values, not only counts: found, missing and null keys; every type of
:data:`VALUE_SCHEMA`; composite keys; batch limits; one-to-many matches; a store that is down is
a :class:`TransientError` (retried), a store that refuses is a :class:`PermanentError` (not
retried) and no library exception escapes; a store that never answers is abandoned within
``timeout.ms``; ``close`` releases every connection and task. A store that lacks a feature
says so (``supports_composite``, ``supports_one_to_many``, ``refused_options``) and its tests
are skipped with the reason. It needs pytest (the ``test`` extra).

The suite lives in parts, all importable from here: the store protocol and the records it
writes (:mod:`.contract_store`), how it drives a connector (:mod:`.contract_harness`), its
network fixtures (:mod:`.contract_network`), and its tests (:mod:`.contract_values`,
:mod:`.contract_failures`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

# every name the suite had here is still importable from here (its private helpers too)
from lookup_source.testing.contract_failures import FAST_FAILURE, FailuresContract
from lookup_source.testing.contract_harness import _ask as _ask
from lookup_source.testing.contract_harness import _config as _config
from lookup_source.testing.contract_harness import lookup_rows
from lookup_source.testing.contract_network import _closed_port as _closed_port
from lookup_source.testing.contract_network import _own_connections as _own_connections
from lookup_source.testing.contract_network import _SilentServer as _SilentServer
from lookup_source.testing.contract_store import (
    COMPOSITE_KEY_SCHEMA,
    KEY_SCHEMA,
    VALUE_SCHEMA,
    ContractStore,
    Record,
    json_ready,
    user,
)
from lookup_source.testing.contract_values import ValuesContract


# pytest collects inherited tests in reverse MRO order: values first, then failures, as before
class ConnectorContract(FailuresContract, ValuesContract):
    """The contract suite; subclass it and give the ``contract_store`` fixture."""

    schema: ClassVar[str] = f"{KEY_SCHEMA}, {VALUE_SCHEMA}"
    composite_schema: ClassVar[str] = f"{COMPOSITE_KEY_SCHEMA}, {VALUE_SCHEMA}"

    @pytest.fixture
    def contract_store(self) -> ContractStore:
        raise NotImplementedError("give the contract a contract_store fixture")

    @pytest.fixture
    def users(self, contract_store: ContractStore) -> dict[int, dict[str, Any]]:
        records = {i: user(i) for i in range(1, 41)}
        contract_store.put({i: [r] for i, r in records.items()})
        return records


__all__ = [
    "COMPOSITE_KEY_SCHEMA",
    "FAST_FAILURE",
    "KEY_SCHEMA",
    "VALUE_SCHEMA",
    "ConnectorContract",
    "ContractStore",
    "FailuresContract",
    "Record",
    "ValuesContract",
    "json_ready",
    "lookup_rows",
    "user",
]
