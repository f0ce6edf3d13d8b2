"""Conditions on a pair of an input row and one of its key's matches (:class:`MatchCondition`):
``visit.ts >= version.valid_from AND visit.ts < version.valid_to`` — a validity range, a
point-in-time join of a versioned table — evaluated in Arrow on every pair, before a row is
joined to what is left of its matches (a LEFT join keeps a row none of whose matches pass,
with nulls; a semi join keeps a row some of whose matches pass).

A condition compares an input column, a value column or a literal with another, all of one
type whose Arrow comparison is Spark's (integers, decimals, dates, timestamps, strings
compared by their bytes, booleans); a comparison with a null is not true. The SQL extension
hands them to the table function as JSON::

    [{"op": "ge", "left": {"input": "ts"}, "right": {"value": "valid_from"}},
     {"op": "lt", "left": {"input": "ts"}, "right": {"value": "valid_to"}}]
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lookup_source.errors import SchemaError

OPERANDS = ("input", "value", "literal")
"""What a condition's side is: an input column, a value column, a literal."""

FIELDS = ("op", "left", "right")
"""A condition's fields (its JSON object's keys)."""

OPERATORS = {
    "eq": pc.equal,
    "ne": pc.not_equal,
    "lt": pc.less,
    "le": pc.less_equal,
    "gt": pc.greater,
    "ge": pc.greater_equal,
}


@dataclass(frozen=True)
class Operand:
    """An input column (``input``), a value column (``value``) or a literal (``literal``)."""

    kind: str
    name: str = ""
    literal: Any = None

    def values(self, rows: pa.RecordBatch, matches: pa.RecordBatch, row: Any, match: Any) -> Any:
        """This operand on each pair: the row's column taken at ``row``, the match's at
        ``match`` (indices), or the literal (a scalar)."""
        if self.kind == "input":
            return rows.column(self.name).take(row)
        if self.kind == "value":
            return matches.column(self.name).take(match)
        return self.literal

    def describe(self) -> str:
        return repr(self.literal) if self.kind == "literal" else f"{self.kind} {self.name}"


@dataclass(frozen=True)
class MatchCondition:
    """``left <op> right`` on a pair (see the module)."""

    op: str
    left: Operand
    right: Operand

    def holds(self, rows: pa.RecordBatch, matches: pa.RecordBatch, row: Any, match: Any) -> Any:
        left = self.left.values(rows, matches, row, match)
        right = self.right.values(rows, matches, row, match)
        return pc.fill_null(OPERATORS[self.op](left, right), False)


def parse_match_conditions(
    text: str, input_schema: pa.Schema, value_fields: Sequence[pa.Field]
) -> tuple[MatchCondition, ...]:
    """The conditions ``text`` (JSON, see the module; empty: none), checked against the input's
    columns and the value columns: each compares two operands of one type."""
    if not text.strip():
        return ()
    try:
        items = json.loads(text)
    except ValueError as error:
        raise SchemaError(f"the match conditions are not JSON: {error}") from None
    values = {f.name: f.type for f in value_fields}
    inputs = {f.name: f.type for f in input_schema}
    conditions = []
    op_field, left_field, right_field = FIELDS
    for item in items if isinstance(items, list) else [None]:
        if not isinstance(item, dict) or item.get(op_field) not in OPERATORS:
            raise SchemaError(f"a match condition must be {{'op', 'left', 'right'}}: {item!r}")
        left, left_type = _operand(item.get(left_field), inputs, values)
        right, right_type = _operand(item.get(right_field), inputs, values)
        kind = left_type or right_type
        if kind is None or (left_type and right_type and not _comparable(left_type, right_type)):
            raise SchemaError(f"a match condition compares {left_type} with {right_type}: {item}")
        left, right = (_typed(o, kind) for o in (left, right))
        conditions.append(MatchCondition(item[op_field], left, right))
    return tuple(conditions)


def _operand(
    spec: Any, inputs: dict[str, pa.DataType], values: dict[str, pa.DataType]
) -> tuple[Operand, pa.DataType | None]:
    input_, value, literal = OPERANDS
    if isinstance(spec, dict) and input_ in spec and spec[input_] in inputs:
        return Operand(input_, spec[input_]), inputs[spec[input_]]
    if isinstance(spec, dict) and value in spec and spec[value] in values:
        return Operand(value, spec[value]), values[spec[value]]
    if isinstance(spec, dict) and literal in spec and spec[literal] is not None:
        return Operand(literal, literal=spec[literal]), None
    raise SchemaError(f"a match condition's operand names no column of the lookup: {spec!r}")


def _comparable(left: pa.DataType, right: pa.DataType) -> bool:
    """Whether Arrow compares ``left`` with ``right`` as Spark does: one type, or two
    timestamps of one unit that are both instants (Spark's ``timestamp``): their time zones only
    say how to print them — Spark sends an input's in the session's (``Etc/UTC``,
    ``Europe/Paris``), the lookup's values come in UTC."""
    if left == right:
        return True
    return (
        pa.types.is_timestamp(left)
        and pa.types.is_timestamp(right)
        and left.unit == right.unit
        and left.tz is not None
        and right.tz is not None
    )


def _typed(operand: Operand, kind: pa.DataType) -> Operand:
    """A literal as a scalar of ``kind`` (the other side's type)."""
    if operand.kind != "literal":
        return operand
    value = operand.literal
    if pa.types.is_decimal(kind):
        value = Decimal(str(value))
    return Operand("literal", literal=pa.scalar(value, type=kind))


def pairs_passing(
    conditions: Sequence[MatchCondition],
    rows: pa.RecordBatch,
    matches: pa.RecordBatch,
    row: np.ndarray,
    match: np.ndarray,
) -> np.ndarray:
    """For each pair (input row ``row[i]``, match row ``match[i]``), whether every condition
    holds (a pair with ``match`` -1, an error row's, always does)."""
    passing = np.ones(len(row), dtype=bool)
    real = match >= 0
    if not real.any():
        return passing
    rows_taken = pa.array(row[real])
    matches_taken = pa.array(match[real])
    held = np.ones(int(real.sum()), dtype=bool)
    for condition in conditions:
        result = condition.holds(rows, matches, rows_taken, matches_taken)
        held &= np.asarray(result.to_numpy(zero_copy_only=False), dtype=bool)
    passing[real] = held
    return passing


__all__ = ["MatchCondition", "Operand", "pairs_passing", "parse_match_conditions"]
