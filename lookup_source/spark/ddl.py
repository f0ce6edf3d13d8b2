"""Parse a DDL schema string (``"user_id long, name string, tags array<string>"``) in Python.

Spark's own parser needs a running JVM; this one lets a lookup plan be built anywhere (tests,
executors, tools). When a Spark session is active, Spark's parser is used instead.
"""

from __future__ import annotations

import re

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

_ATOMIC: dict[str, DataType] = {
    "string": StringType(),
    "binary": BinaryType(),
    "boolean": BooleanType(),
    "bool": BooleanType(),
    "tinyint": ByteType(),
    "byte": ByteType(),
    "smallint": ShortType(),
    "short": ShortType(),
    "int": IntegerType(),
    "integer": IntegerType(),
    "bigint": LongType(),
    "long": LongType(),
    "float": FloatType(),
    "real": FloatType(),
    "double": DoubleType(),
    "date": DateType(),
    "timestamp": TimestampType(),
    "timestamp_ltz": TimestampType(),
    "timestamp_ntz": TimestampNTZType(),
}
_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|([A-Za-z_][A-Za-z0-9_]*)|(\d+)|([<>(),:]))")


class DDLError(ValueError):
    pass


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        position = 0
        text = text.rstrip()
        while position < len(text):
            match = _TOKEN.match(text, position)
            if not match or match.end() == position:
                raise DDLError(f"unexpected text at position {position}: {text[position:][:20]!r}")
            self.tokens.append(next(group for group in match.groups() if group is not None))
            position = match.end()
        self.position = 0

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None:
            raise DDLError(f"unexpected end, expected {expected or 'more'}")
        if expected is not None and token.lower() != expected:
            raise DDLError(f"expected {expected!r}, got {token!r}")
        self.position += 1
        return token

    def name(self) -> str:
        token = self.take()
        if token.startswith("`"):
            return token[1:-1].replace("``", "`")
        if not re.match(r"[A-Za-z_]", token):
            raise DDLError(f"expected a column name, got {token!r}")
        return token

    def fields(self, closing: str | None) -> list[StructField]:
        fields = []
        while True:
            name = self.name()
            if self.peek() == ":":
                self.take(":")
            data_type = self.data_type()
            nullable = True
            if (self.peek() or "").lower() == "not":
                self.take("not")
                self.take("null")
                nullable = False
            fields.append(StructField(name, data_type, nullable))
            if self.peek() == ",":
                self.take(",")
                continue
            if self.peek() == closing:
                return fields
            raise DDLError(f"expected ',' or the end, got {self.peek()!r}")

    def data_type(self) -> DataType:
        word = self.take().lower()
        if word in ("decimal", "dec", "numeric"):
            precision, scale = 10, 0
            if self.peek() == "(":
                self.take("(")
                precision = int(self.take())
                if self.peek() == ",":
                    self.take(",")
                    scale = int(self.take())
                self.take(")")
            return DecimalType(precision, scale)
        if word in ("varchar", "char"):
            self.take("(")
            self.take()
            self.take(")")
            return StringType()
        if word == "array":
            self.take("<")
            element = self.data_type()
            self.take(">")
            return ArrayType(element, True)
        if word == "map":
            self.take("<")
            key = self.data_type()
            self.take(",")
            value = self.data_type()
            self.take(">")
            return MapType(key, value, True)
        if word == "struct":
            self.take("<")
            if self.peek() == ">":
                self.take(">")
                return StructType([])
            fields = self.fields(">")
            self.take(">")
            return StructType(fields)
        if word in _ATOMIC:
            return _ATOMIC[word]
        raise DDLError(f"unknown type {word!r}")


def parse_ddl(text: str) -> StructType:
    """Parse ``"a long, b struct<c: int>"`` (or ``"a: long"``) into a ``StructType``.

    >>> parse_ddl("user_id long, name string").fieldNames()
    ['user_id', 'name']
    """
    parser = _Parser(text)
    if parser.peek() is None:
        raise DDLError("the schema is empty")
    fields = parser.fields(None)
    if parser.peek() is not None:
        raise DDLError(f"unexpected {parser.peek()!r}")
    return StructType(fields)
