"""The contract between the SQL extension's rule (Java) and Python: every name both sides use,
declared once, here, from where each belongs on the Python side — the options the rule reads
from a lookup table's relation, the table function's arguments and answers, the columns the
rewrite names, the factory of a relation's table function.

The Java side reads them from ``Contract.java``, generated from :data:`CONTRACT` (never
edited by hand): ``python -m lookup_source sql-extension --build`` (what ``make`` runs)
writes it before it compiles, and a test fails when the file in the tree differs from what
this module generates, or when a Java source spells one of these values itself::

    python -m lookup_source.spark.sql_extension.contract --write
"""

from __future__ import annotations

import sys
from pathlib import Path

from lookup_source.engine.output.match_conditions import FIELDS, OPERANDS, OPERATORS
from lookup_source.engine.spec import HOWS
from lookup_source.functions import FUNCTION_CONNECTOR
from lookup_source.settings import (
    CONNECTOR,
    ERROR_COLUMN,
    KEY_COLUMN,
    KEYS,
    SQL_JOIN_FUNCTION,
)
from lookup_source.spark.join_markers import (
    COLUMN_PREFIX,
    DECISION_LOOKUP,
    DECISION_METADATA,
    DECISION_SPARK,
    FACT_INPUT_ROWS,
    FACT_REWRITE,
    FACT_TABLE_KEYS,
    KEY_METADATA,
    NOT_IN,
    NOT_IN_NULL,
    SQL_JOIN,
    VETO,
    VETO_REASON,
)
from lookup_source.spark.source_registry import SOURCE_NAME

HERE = Path(__file__).resolve().parent
GENERATED = HERE / "java" / "asynclookup" / "sql" / "Contract.java"


CONTRACT: dict[str, str | int] = {
    # the data source, and the options of its relation the rule reads
    "SOURCE": SOURCE_NAME,
    "OPTION_CONNECTOR": CONNECTOR,
    "OPTION_KEYS": KEYS,
    "OPTION_KEY_COLUMN": KEY_COLUMN,
    "OPTION_JOIN_FUNCTION": SQL_JOIN_FUNCTION,
    "FUNCTION_CONNECTOR": FUNCTION_CONNECTOR,
    "ERROR_COLUMN": ERROR_COLUMN,
    "KEY_METADATA": KEY_METADATA,
    # the table function: its mode, joins and answers
    "MODE_SQL_JOIN": SQL_JOIN,
    "VETO_COLUMN": VETO,
    "VETO_REASON": VETO_REASON,
    "COLUMN_PREFIX": COLUMN_PREFIX,
    # the rewrite's decisions, as lookup_metrics reads them
    "DECISION_LOOKUP": DECISION_LOOKUP,
    "DECISION_SPARK": DECISION_SPARK,
    "DECISION_METADATA": DECISION_METADATA,
    # what the rule tells the table function of the query (its last argument, JSON)
    "FACT_INPUT_ROWS": FACT_INPUT_ROWS,
    "FACT_TABLE_KEYS": FACT_TABLE_KEYS,
    "FACT_REWRITE": FACT_REWRITE,
    # a relation's table function: made by this factory, in Arrow (PythonEvalType's
    # SQL_ARROW_UDTF); named here, not imported (they need PySpark 4.1): a test checks them
    "FACTORY_MODULE": "lookup_source.spark.sql_functions",
    "FACTORY": "join_function",
    "ARROW_UDTF": 302,
}
CONTRACT |= {f"HOW_{how.upper()}": how for how in HOWS}
CONTRACT["HOW_NOT_IN"] = NOT_IN
CONTRACT["NOT_IN_NULL_COLUMN"] = NOT_IN_NULL
CONTRACT |= {f"OP_{op.upper()}": op for op in OPERATORS}
CONTRACT |= {f"OPERAND_{kind.upper()}": kind for kind in OPERANDS}
CONTRACT |= {f"FIELD_{field.upper()}": field for field in FIELDS}


def java_source() -> str:
    """``Contract.java``, from :data:`CONTRACT`."""
    lines = [
        "package asynclookup.sql;",
        "",
        "/**",
        " * The names the rule shares with Python, generated from {@code",
        " * lookup_source.spark.sql_extension.contract} when the jar is built. Do not edit: change",
        " * them in Python (a test fails when this file is not what Python generates).",
        " */",
        "final class Contract {",
        "  private Contract() {}",
        "",
    ]
    for name, value in CONTRACT.items():
        if isinstance(value, int):
            lines.append(f"  static final int {name} = {value};")
        else:
            escaped = value.replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'  static final String {name} = "{escaped}";')
    lines.append("}")
    return "\n".join(lines) + "\n"


def write() -> bool:
    """Write ``Contract.java`` if it differs from what :func:`java_source` makes; whether it
    did."""
    text = java_source()
    if GENERATED.exists() and GENERATED.read_text(encoding="utf-8") == text:
        return False
    GENERATED.write_text(text, encoding="utf-8")
    return True


if __name__ == "__main__":  # python -m lookup_source.spark.sql_extension.contract --write
    if "--write" in sys.argv:
        print(f"{GENERATED}: {'written' if write() else 'up to date'}")
    else:
        print(java_source(), end="")
