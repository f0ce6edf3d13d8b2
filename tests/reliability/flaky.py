"""Connectors for Spark-level fault tests (selected as module:Class, loaded on executors)."""

from __future__ import annotations

from collections.abc import Sequence

from lookup_source.connectors.base import Key, LookupResult
from lookup_source.connectors.redis_client import RedisLookupClient
from lookup_source.errors import PermanentError


class FailFirstAttemptRedis(RedisLookupClient):
    """Fails the first attempt of partition 0's task mid-way, after some rows went out."""

    calls = 0

    async def lookup(self, keys: Sequence[Key]) -> LookupResult:
        from pyspark import TaskContext

        context = TaskContext.get()
        FailFirstAttemptRedis.calls += 1
        if (
            context is not None
            and context.partitionId() == 0
            and context.attemptNumber() == 0
            and FailFirstAttemptRedis.calls > 3
        ):
            raise PermanentError("injected: this task attempt dies")
        return await super().lookup(keys)
