"""Generate the options tables (docs/options.md) from the option definitions, so they cannot
drift.

``python -m lookup_source.docs`` prints them, ``python -m lookup_source.docs --write
docs/options.md`` rewrites the page's generated part (``make docs``); a test checks the page.
"""

from __future__ import annotations

from lookup_source.connector_api.options import OptionSpec
from lookup_source.registry import FIRST_PARTY, resolve_connector
from lookup_source.settings import DECLARED, CoreOption


def _default(spec: OptionSpec) -> str:
    if spec.name == "batch.size":  # each connector's own, stated by the connector
        return "the connector's: " + ", ".join(
            f"{name} {resolve_connector(name).describe_batch_size_default()}"
            for name in FIRST_PARTY
        )
    text = spec.describe_default()
    return text if text.startswith("(") or " " in text else f"`{text}`"


def _table(options: tuple[OptionSpec | CoreOption, ...]) -> list[str]:
    lines = ["| option | default | meaning |", "|---|---|---|"]
    for item in options:
        spec = item.spec if isinstance(item, CoreOption) else item
        scope = item.describe_scope() if isinstance(item, CoreOption) else None
        doc = f"*For {scope}.* {spec.doc}" if scope else spec.doc
        name = f"{spec.name}<Name>" if spec.prefix else spec.name
        lines.append(f"| `{name}` | {_default(spec)} | {doc} |")
    return lines


def options_markdown() -> str:
    """The options tables: core options (with the surfaces that take them,
    when not every one), then each first-party connector's."""
    lines = ["### Options of every connector", "", *_table(DECLARED)]
    for name in FIRST_PARTY:
        client = resolve_connector(name)
        if client.option_specs:
            title = f"### Options of the `{name}` connector"
            lines += ["", title, "", *_table(client.option_specs)]
    return "\n".join(lines)


START = "<!-- options:start"
END = "<!-- options:end -->"


def rewrite_readme(path: str) -> None:
    """Replace the generated part of the page at ``path`` with :func:`options_markdown`."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    start = text.index("\n", text.index(START)) + 1
    end = text.index(END)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text[:start] + options_markdown() + "\n" + text[end:])


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        rewrite_readme(sys.argv[2])
    else:
        print(options_markdown())
