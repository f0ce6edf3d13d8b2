"""The lookup cache (:class:`CacheSettings`) and the tier shared by every worker and job
(:class:`SharedCacheSettings`)."""

from __future__ import annotations

from dataclasses import dataclass

from lookup_source.connector_api.options import (
    choice,
    int_between,
    parse_bool,
    parse_non_negative_int,
    parse_text,
)
from lookup_source.connector_api.shared_cache import SharedCacheStore
from lookup_source.redaction import redact_url
from lookup_source.registry import resolve_shared_cache
from lookup_source.settings.declare import duration_ms, group, option


@dataclass(frozen=True)
class SharedCacheSettings:
    """A cache tier shared by every worker and job (a Redis), after the per-worker cache."""

    def store_class(self) -> type[SharedCacheStore]:
        """The class of the store ``url`` names (by its scheme)."""
        assert self.url is not None
        return resolve_shared_cache(self.url)

    def __repr__(self) -> str:  # the URL may hold a password
        url = redact_url(self.url) if self.url else None
        return (
            f"SharedCacheSettings(url={url!r}, ttl_s={self.ttl_s}, "
            f"missing_keys={self.missing_keys}, timeout_s={self.timeout_s}, "
            f"namespace={self.namespace!r}, secret_env={self.secret_env!r}, "
            f"max_value_bytes={self.max_value_bytes})"
        )

    url: str | None = option(
        "cache.shared.url",
        parse_text,
        None,
        "A Redis (`redis://`, `rediss://`) that every worker and every job reads answers from "
        "before asking the store, and writes the store's answers to (needs the `redis` "
        "connector installed). Keys are namespaced by the lookup's identity: everything that "
        "decides the answers (connector, URL, every option and header, the values of `*.env` "
        "options and the content of certificate files on the executor, key and value schema, "
        "a `fetch=` function's code and state), secrets through a keyed one-way digest; each "
        "value carries a tag keyed by that identity. See docs/guarantees.md, Trust.",
        default_doc="(none)",
    )
    ttl_s: float = duration_ms(
        "cache.shared.ttl.ms", 3_600_000, "How long the shared tier keeps an answer.", positive=True
    )
    missing_keys: bool = option(
        "cache.shared.missing-keys",
        parse_bool,
        True,
        "Keep misses in the shared tier too (for cache.shared.ttl.ms).",
    )
    timeout_s: float = duration_ms(
        "cache.shared.timeout.ms",
        100,
        "Time limit of a read of the shared tier (a write, which no answer waits for: ten "
        "times this); past it, or on any error, the keys go straight to the store and the "
        "worker leaves the tier alone for 5 s (counted in `shared_errors`).",
        positive=True,
    )
    namespace: str = option(
        "cache.shared.namespace",
        parse_text,
        "",
        "Added to the lookup's identity, which already holds everything that decides the "
        "answers (secrets included, by a keyed digest): a namespace can only narrow what is "
        "shared (lookups with different namespaces never share), never widen it.",
        default_doc="(empty)",
    )
    secret_env: str | None = option(
        "cache.shared.secret.env",
        parse_text,
        None,
        "Environment variable, on the executors, holding a secret that joins the lookup's "
        "identity: only lookups that know it share answers, and a value written by anyone "
        "without it is not believed (its tag does not match). Set it when the lookup itself "
        "holds no secret and others can write to the shared tier's Redis.",
        default_doc="(none)",
    )
    max_value_bytes: int = option(
        "cache.shared.max-value-bytes",
        int_between(64, 1 << 30),
        4 << 20,
        "Largest answer (one key's rows, compressed and uncompressed) written to or believed "
        "from the shared tier; a larger one is not written, and one claiming more is a miss.",
        unit="bytes",
    )


@dataclass(frozen=True)
class CacheSettings:
    """The lookup cache: ``mode`` partial (LRU, on when ``max_rows`` > 0) or full."""

    mode: str = option(
        "cache.mode",
        choice("partial", "full"),
        "partial",
        "`partial`: an LRU of looked-up keys per Python worker (on when cache.max-rows > 0); "
        "`full`: the whole table, loaded once per worker through the connector's scan.",
    )
    max_rows: int = option(
        "cache.max-rows",
        parse_non_negative_int,
        0,
        "Keys kept by the partial cache per worker (0 = no cache).",
    )
    ttl_s: float = duration_ms(
        "cache.ttl.ms", 0, "A cached key expires this long after it was written (0 = never)."
    )
    missing_keys: bool = option(
        "cache.missing-keys",
        parse_bool,
        True,
        "Cache misses too, so a missing key is not asked again until it expires.",
    )
    reload_s: float = duration_ms(
        "cache.reload.ms",
        0,
        "Full cache: reload the table in the background this often (0 = never).",
    )
    worker_max_mb: int = option(
        "cache.worker.max-mb",
        int_between(1, 1024 * 1024),
        1024,
        "Memory (estimated, MiB) the caches of all lookups in one Python worker may hold "
        "together; beyond it, the least recently used lookups' caches are dropped (a partial "
        "cache in use alone above it keeps its most recent keys). While lookups with "
        "different values run in one worker, the smallest applies; else the latest task's.",
    )
    shared: SharedCacheSettings = group(SharedCacheSettings)
