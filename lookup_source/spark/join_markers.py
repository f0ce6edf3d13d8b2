"""Markers the SQL extension's rewrite and the lookup table function exchange, beside the
options (:mod:`.contract` hands them to the Java side)."""

from __future__ import annotations

SQL_JOIN = "sql-join"
"""The mode the SQL extension calls a lookup table function in."""

NOT_IN = "not-in"
"""What the SQL extension calls a ``NOT IN`` with: an anti join whose answer depends on what the
table holds when it runs (:mod:`.not_in`)."""

NOT_IN_NULL = "__asynclookup_not_in_null"
"""The boolean column of a ``NOT IN``'s input that says whether the row's value is null (its key
may be null for a value the table's key cannot hold, which is a miss)."""

VETO = "__asynclookup_veto"
"""The one column of a refusal."""

VETO_REASON = "reason"
"""The key of the refusal's metadata that says why."""

COLUMN_PREFIX = "__asynclookup_"
"""The prefix of every column the rewrite names (no lookup table column may start with it)."""

KEY_METADATA = "asynclookup.key"
"""Marks a key column in a schema the store inferred (no key.column given)."""

DECISION_LOOKUP = "lookup"
"""A decision of the rewrite (``Decisions``): the join runs as lookups."""

DECISION_SPARK = "spark"
"""A decision of the rewrite: the join is left to Spark."""

DECISION_METADATA = "asynclookup.decision"
"""The prefix of the metadata key (``asynclookup.decision.<rewrite>``) on the first key column
of a table function's answer to a rewritten JOIN that says why the join runs as lookups (the
rule records it as that rewrite's decision; the rewrite's own id keeps a user's column, or
another rewrite's answer below it, from passing for it)."""

FACT_INPUT_ROWS = "input_rows"
"""What the rule tells the table function (its last argument, JSON): Spark's estimate of the
join's input rows (absent: unknown), which the table's ``strategy`` judges."""

FACT_REWRITE = "rewrite"
"""What the rule tells the table function: the rewrite's own id, which its decision's metadata
key carries."""

FACT_TABLE_KEYS = "table_keys"
"""What the rule tells the table function: the table's key columns, as the rule took them (the
table function refuses a rewrite whose keys are not the data source's)."""
