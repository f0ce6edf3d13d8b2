"""The Postgres connector's own options, each declared once as a typed constant (read with
``TABLE.get(config)``); the TLS and password options come from the connector kit."""

from __future__ import annotations

from lookup_source.connector_api import OptionSpec, parse_positive_int, parse_text

TABLE: OptionSpec[str | None] = OptionSpec(
    "postgres.table",
    parse_text,
    None,
    "Table to look keys up in, optionally `schema.table`; its columns are named as in "
    "the Spark schema.",
)

QUERY: OptionSpec[str | None] = OptionSpec(
    "postgres.query",
    parse_text,
    None,
    "Instead of a table: a query taking the keys as `$1` (an array; composite keys: "
    "`$1, $2, ...`, one array per key column) and returning the key and value columns.",
)

POOL_SIZE: OptionSpec[int] = OptionSpec(
    "postgres.pool-size",
    parse_positive_int,
    10,
    "Connections per client (at most `capacity`, and at most budget.max-in-flight when a "
    "cluster budget is set, which also closes connections idle for 10 s; a Python "
    "worker keeps one client per lookup configuration, from task to task). Requests "
    "beyond it wait for a free connection: keep Python workers x pool size under the "
    "server's max_connections, or set a budget (docs/deployment.md).",
)

JDBC_KEY_FILE: OptionSpec[str | None] = OptionSpec(
    "postgres.tls.jdbc-key-file",
    parse_text,
    None,
    "With a client certificate: the same private key in PKCS-8 DER (.pk8) or PKCS-12, on "
    "the executors, for Spark's JDBC reader (scan.reader), which cannot read the PEM key of "
    "postgres.tls.key-file (`openssl pkcs8 -topk8 -inform PEM -outform DER -nocrypt -in "
    "client.key -out client.pk8`). Without it, a scan with a client certificate reads "
    "through the data source.",
)
