"""Connectors for Spark-level fault tests (selected as module:Class, loaded on executors)."""

from __future__ import annotations

import pyarrow as pa
from asynclookup_redis import RedisLookupClient

from lookup_source.connector_api import Matches
from lookup_source.errors import PermanentError


class FailFirstAttemptRedis(RedisLookupClient):
    """Fails the first attempt of partition 0's task mid-way, after some rows went out."""

    calls = 0

    async def lookup_arrow(self, keys: pa.RecordBatch) -> Matches:
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
        return await super().lookup_arrow(keys)
