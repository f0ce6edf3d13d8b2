"""Key templates: ``user:{key}``, ``https://api/users/{key}``, ``{tenant}:{user_id}``.

Shared by every connector that turns a lookup key into text (a Redis key, a URL).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from lookup_source.connector_api.client import Key
from lookup_source.connector_api.keys import python_keys
from lookup_source.errors import OptionError

MAX_FORMAT_WIDTH = 1024
"""The largest width or precision a placeholder's format may ask for (``{key:>20}``): a key
pattern must not build keys of a gigabyte."""


def key_text(value: Any) -> str:
    """How one key value is written into a template: dates in ISO form, booleans lower case."""
    kind = type(value)
    if kind is str:  # the common keys first, by their exact type (bool is an int's subclass)
        return value
    if kind is int:
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="surrogateescape")
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


class KeyTemplate:
    """A text whose ``{placeholders}`` name the key columns (``{key}`` for a single key).

    >>> KeyTemplate("redis.key.pattern", "user:{key}", ("user_id",)).render(42)
    'user:42'
    >>> KeyTemplate("url", "/t/{tenant}/u/{id}", ("tenant", "id")).render(("a b", 7))
    '/t/a b/u/7'
    """

    def __init__(
        self,
        option: str,
        template: str,
        key_columns: tuple[str, ...],
        *,
        encode: Callable[[str], str] = str,
    ) -> None:
        self.validate(option, template, key_columns)
        self.template = template
        self.key_columns = key_columns
        self.encode = encode
        self._verbatim = template == "{key}" and encode is str
        self._split = self._prefix_and_suffix()
        self._affixes = self._split if encode is str else None  # text built in Arrow

    def _prefix_and_suffix(self) -> tuple[str, str] | None:
        """``("user:", "")`` for ``user:{key}``: a template with one plain placeholder;
        None otherwise."""
        if len(self.key_columns) != 1:
            return None
        parts = list(string.Formatter().parse(self.template))
        named = [i for i, p in enumerate(parts) if p[1] is not None]
        if len(named) != 1 or parts[named[0]][2] or parts[named[0]][3]:
            return None
        at = named[0]
        return "".join(p[0] for p in parts[: at + 1]), "".join(p[0] for p in parts[at + 1 :])

    @staticmethod
    def placeholders(option: str, template: str) -> list[str]:
        try:
            return [
                name for _, name, _, _ in string.Formatter().parse(template) if name is not None
            ]
        except ValueError as exc:
            raise OptionError(option, f"{template!r} is not a valid template: {exc}") from None

    @classmethod
    def validate(cls, option: str, template: str, key_columns: tuple[str, ...]) -> None:
        """Raise ``OptionError`` unless ``template`` uses exactly the key columns."""
        names = cls.placeholders(option, template)
        single = len(key_columns) == 1
        allowed = set(key_columns) | ({"key"} if single else set())
        for name in names:
            if name not in allowed:
                expected = (
                    f"{{key}} or {{{key_columns[0]}}}"
                    if single
                    else " and ".join(f"{{{k}}}" for k in key_columns)
                )
                raise OptionError(
                    option, f"{template!r} uses placeholder {{{name}}}; use {expected}"
                )
        if not names:
            raise OptionError(
                option, f"{template!r} has no placeholder: every key would be the same"
            )
        for _, field, spec, _ in string.Formatter().parse(template):
            if spec and ("{" in spec or "}" in spec):
                raise OptionError(
                    option,
                    f"{template!r}: the format of {{{field}}} may not hold a placeholder "
                    f"({spec!r}): a key would choose its own width",
                )
            if spec:  # a key's text is formatted as a string: a format strings take
                try:
                    format("key", spec)
                except ValueError as exc:
                    raise OptionError(
                        option, f"{template!r}: {{{field}:{spec}}} is not a format for a key: {exc}"
                    ) from None
            widths = [int(n) for n in re.findall(r"\d+", spec or "")]
            if widths and max(widths) > MAX_FORMAT_WIDTH:
                raise OptionError(
                    option,
                    f"{template!r}: the format {{{field}:{spec}}} asks for {max(widths):,} "
                    f"characters; a width or precision is at most {MAX_FORMAT_WIDTH:,}",
                )
        if not single:
            missing = [k for k in key_columns if k not in names]
            if missing:
                raise OptionError(
                    option, f"{template!r} must use every key column; missing {', '.join(missing)}"
                )

    def render_all(self, keys: pa.RecordBatch) -> list[str]:
        """The text of every key of a batch of key columns, in order (integer and string keys
        are turned into text by Arrow, then joined to the template's literal parts)."""
        column = keys.column(0)
        if self._affixes is not None and (
            pa.types.is_integer(column.type)
            or pa.types.is_string(column.type)
            or pa.types.is_large_string(column.type)
        ):
            prefix, suffix = self._affixes
            texts: list[str] = column.cast(pa.string()).to_pylist()
            if prefix and suffix:
                return [prefix + t + suffix for t in texts]
            if prefix:
                return [prefix + t for t in texts]
            return [t + suffix for t in texts] if suffix else texts
        return [self.render(k) for k in python_keys(keys)]

    def render(self, key: Key) -> str:
        """The text for one key (a scalar, or a tuple for a composite key)."""
        if len(self.key_columns) == 1:
            text = key_text(key)
            if self._verbatim:
                return text
            value = self.encode(text)
            if self._split is not None:
                prefix, suffix = self._split
                return prefix + value + suffix
            return self.template.format_map({"key": value, self.key_columns[0]: value})
        assert isinstance(key, tuple)
        values = {name: self.encode(key_text(part)) for name, part in zip(self.key_columns, key)}
        return self.template.format_map(values)

    def scan_pattern(self) -> tuple[str, re.Pattern[str]]:
        """A glob that matches every text of the template (``user:*`` for ``user:{key}``,
        for a Redis ``SCAN MATCH``), and a regex whose groups give the key parts back."""
        glob: list[str] = []
        regex: list[str] = []
        parts = list(string.Formatter().parse(self.template))
        for position, (literal, name, _, _) in enumerate(parts):
            glob.append(re.sub(r"([*?\[\]\\])", r"\\\1", literal))
            regex.append(re.escape(literal))
            if name is not None:
                glob.append("*")
                regex.append("(.*)" if position == len(parts) - 1 else "(.*?)")
        return "".join(glob), re.compile("".join(regex), re.DOTALL)
