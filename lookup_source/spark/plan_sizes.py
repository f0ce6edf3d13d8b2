"""Spark's estimate of a DataFrame's rows, as the strategy reads it: the optimizer's row count,
or its size in bytes over the width of a row in Spark's own terms (``DataType.defaultSize``)."""

from __future__ import annotations

import re
from typing import Any

from lookup_source.spark.internals import plan_text

_ROW_COUNT = re.compile(r"rowCount=([0-9.E+]+)")
_SIZE = re.compile(r"sizeInBytes=([0-9.]+)\s*([KMGTPE]?i?B)")
_UNITS = {"B": 1, **{f"{p}iB": 2 ** (10 * (i + 1)) for i, p in enumerate("KMGTPE")}}


def input_rows(df: Any) -> int | None:
    """Spark's estimate of ``df``'s rows: the optimizer's row count, or its size in bytes over
    the width of a row; None when Spark cannot tell (or says more rows than there can be)."""
    try:
        text = plan_text(df, "cost")  # the optimized plan, its root's statistics first
        width = row_width(df.schema)
    except Exception:
        return None
    if "Statistics(" not in text:
        return None
    statistics = text[text.index("Statistics(") :].split(")", 1)[0]
    found = _ROW_COUNT.search(statistics)
    if found:
        return int(float(found.group(1)))
    size = _SIZE.search(statistics)
    if size is None:
        return None
    total = float(size.group(1)) * _UNITS.get(size.group(2), 1)
    if total >= 2**62:  # Spark's "unknown" is about Long.MaxValue bytes
        return None
    return int(total // width)


_FIXED_WIDTH = {
    "boolean": 1,
    "byte": 1,
    "short": 2,
    "integer": 4,
    "float": 4,
    "date": 4,
    "long": 8,
    "double": 8,
    "timestamp": 8,
    "timestamp_ntz": 8,
    "string": 20,
    "binary": 100,
}


def row_width(schema: Any) -> int:
    """Bytes per row in Spark's own estimate (``DataType.defaultSize``: a string 20, a binary
    100, an array or a map one element, a decimal 8 or 16), at least 8."""

    def width(data_type: Any) -> int:
        kind = data_type.typeName()
        if kind == "struct":
            return sum(width(f.dataType) for f in data_type.fields)
        if kind == "array":
            return width(data_type.elementType)
        if kind == "map":
            return width(data_type.keyType) + width(data_type.valueType)
        if kind == "decimal":
            return 8 if data_type.precision <= 18 else 16
        return _FIXED_WIDTH.get(kind, 8)

    return max(8, width(schema))
