"""How a lookup treats its keys (:class:`KeySettings`): whose equality decides a match, and what
a key the store's key type cannot hold is."""

from __future__ import annotations

from dataclasses import dataclass

from lookup_source.connector_api.options import choice
from lookup_source.settings.declare import KEY_EQUALITY, ON_UNFIT_KEY, option


@dataclass(frozen=True)
class KeySettings:
    """``key.equality`` and ``on.unfit-key``; a SQL JOIN rewritten into lookups runs with
    ``spark`` and ``miss`` (:meth:`as_spark_join`), so that it gives Spark's join's rows."""

    equality: str = option(
        KEY_EQUALITY,
        choice("store", "spark"),
        "store",
        "Whose `=` decides which of the store's rows match a key. `store`: every row the store "
        "answers (a case-insensitive collation, `citext` or `char(n)` in Postgres matches "
        "`'eu'` with `'EU'`: a lookup as the store defines it). `spark`: only rows whose own key "
        "equals the asked key as Spark compares it (exact bytes for strings), where the "
        "connector reports its rows' keys (Postgres does); a SQL JOIN rewritten into lookups "
        "always runs with `spark`.",
    )
    on_unfit: str = option(
        ON_UNFIT_KEY,
        choice("error", "miss"),
        "error",
        "A key the store's key type cannot hold (beyond an `int4` column's range, a text with a "
        "NUL, longer than a `name`), so no row can have it: `error` makes it a failed key "
        "saying why (handled by `on.error`); `miss`, a missing key, as Spark's own join finds "
        "no match for it. Both count it in the metrics (`unfit_keys`). A SQL JOIN rewritten "
        "into lookups always runs with `miss`.",
    )

    @classmethod
    def as_spark_join(cls) -> KeySettings:
        """What a SQL JOIN's lookups run with: Spark's equality, unfit keys as misses."""
        return cls(equality="spark", on_unfit="miss")
