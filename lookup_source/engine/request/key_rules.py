"""What a request's answer holds of its keys, as the lookup's options say (:class:`KeyRules`):
which of the store's matches are a key's (``key.equality``), and what a key the store's key
type cannot hold is (``on.unfit-key``). Applied once, to each answer as it arrives, before
anything keeps it (a cache, a retry's merge, a batch that shares the request).

A store may match keys more loosely than Spark compares them: under a case-insensitive
collation (or ``citext``, or ``char(n)``'s padding) Postgres answers ``'eu'`` with the row of
``'EU'``. With ``key.equality=spark`` a match stays only if its own key (``Matches.keys``, which
the connector reports) equals the asked key as Arrow compares them — Spark's equality for the
types a key may have (integers, decimals, binary strings, dates, timestamps). A connector that
reports no keys is taken at its word.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lookup_source.connector_api import Matches
from lookup_source.connector_api.ranges import key_columns_of
from lookup_source.engine.metrics import LookupMetrics


@dataclass(frozen=True)
class KeyRules:
    """``spark_equality``: keep only the matches whose own key equals the asked key;
    ``unfit_as_miss``: a key the store cannot hold is a miss (else a failed key, saying why)."""

    spark_equality: bool = False
    unfit_as_miss: bool = False

    @classmethod
    def of(cls, equality: str, on_unfit: str) -> KeyRules:
        return cls(spark_equality=equality == "spark", unfit_as_miss=on_unfit == "miss")

    def settle(
        self,
        matches: Matches,
        asked: pa.RecordBatch,
        fields: Sequence[pa.Field],
        metrics: LookupMetrics,
    ) -> Matches:
        """``matches``, the answer to the keys ``asked``, as these rules want it: no unfit
        keys left (misses, or error rows), and, with Spark's equality, no match of another
        key; its ``keys`` dropped (nothing after this reads them)."""
        unfit = matches.unfit
        if unfit:
            metrics.unfit_keys += len(unfit)
        if self.spark_equality and matches.keys is not None and matches.num_rows:
            equal = _equal_keys(matches.keys, asked, matches.key_index)
            if not equal.all():
                metrics.unequal_matches += int((~equal).sum())
                matches = matches.rows(np.flatnonzero(equal))
        if matches.keys is not None or matches.unfit is not None:
            matches = Matches(matches.key_index, matches.values, matches.errors)
        if unfit and not self.unfit_as_miss:
            positions = sorted(unfit)
            failed = Matches.failed(positions, [unfit[p] for p in positions], fields)
            matches = Matches.concat([matches, failed], fields)
        return matches


def _equal_keys(returned: pa.RecordBatch, asked: pa.RecordBatch, index: np.ndarray) -> np.ndarray:
    """For each match, whether its key (a row of ``returned``) equals the asked key it answers
    (row ``index[i]`` of ``asked``), every key column; a key that is null or of a type that
    does not compare is unequal."""
    equal = np.ones(len(index), dtype=bool)
    rows = pa.array(index, type=pa.int64())
    asked = key_columns_of(asked)  # a range's bounds are no part of the key
    for position in range(asked.num_columns):
        wanted = asked.column(position).take(rows)
        got = returned.column(position)
        if got.type != wanted.type:
            try:
                got = got.cast(wanted.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                return np.zeros(len(index), dtype=bool)
        same = pc.fill_null(pc.equal(got, wanted), False)
        equal &= np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)
    return equal


STORE_RULES = KeyRules()
"""The defaults: the store's equality, an unfit key a failed one."""

__all__ = ["STORE_RULES", "KeyRules"]
