"""A cluster budget's coordinator on Redis (``budget.url=redis://...``, ``rediss://`` for TLS).

Each call is one Lua script, atomic on the server, timed by the server's own clock (``TIME``),
so the clocks of the executors never matter. A budget ``name`` lives under five keys, which
share a hash tag (one slot of a Redis Cluster) and expire when nobody uses the budget:

- ``asynclookup:budget:{name}:leases`` (hash holder -> leases) and ``...:expiry`` (sorted set
  holder -> when its leases lapse): leases in flight; a holder that stops calling (a killed
  worker) loses its leases ``lease_s`` after its last call;
- ``...:wanting`` (sorted set holder -> until when): holders refused leases lately; while
  there are any, no holder is granted beyond its fair share (the budget over the holders,
  rounded up), and each gives back what it holds beyond it;
- ``...:rate`` and ``...:cost``: the next free request slot and cost unit (server time in ms);
  a reservation of ``n`` takes the ``n`` slots from there, one every ``1 / rate`` seconds, so
  the same slot is never given twice.

After a restart of Redis the keys are gone: each holder's next call says what it holds
(``hold``) and the count is whole again; until then (at most one renewal period) the budget
may admit up to one grant too many per holder. One pool of at most 4 connections per worker.
"""

from __future__ import annotations

from typing import Any

from lookup_source.connector_api import (
    BudgetAsk,
    BudgetCoordinator,
    BudgetGrant,
    BudgetLimits,
    ConnectorConfig,
)

POOL_SIZE = 4
"""Most connections a worker opens to the coordinator."""

WANTING_MS = 2_000
"""How long a refused holder counts as waiting for leases."""

SCRIPT = """
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local holder = ARGV[1]
local max = tonumber(ARGV[2])
local lease_ms = tonumber(ARGV[3])
local hold = tonumber(ARGV[4])
local want = tonumber(ARGV[5])
local granted, fair, contended = 0, 0, 0
if max > 0 then
  local lapsed = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
  for i = 1, #lapsed do redis.call('HDEL', KEYS[1], lapsed[i]) end
  if #lapsed > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  redis.call('HDEL', KEYS[1], holder)
  local counts = redis.call('HVALS', KEYS[1])
  local total = 0
  for i = 1, #counts do total = total + tonumber(counts[i]) end
  local wanting = redis.call('ZRANGE', KEYS[3], 0, -1)
  local without = 0
  for i = 1, #wanting do
    if wanting[i] ~= holder then
      contended = 1
      if redis.call('HEXISTS', KEYS[1], wanting[i]) == 0 then without = without + 1 end
    end
  end
  fair = math.max(1, math.ceil(max / (#counts + 1 + without)))
  if want > 0 then
    local free = max - total - hold
    if contended == 1 then free = math.min(free, fair - hold) end
    granted = math.max(0, math.min(want, free))
    if granted < want then
      redis.call('ZADD', KEYS[3], now + tonumber(ARGV[10]), holder)
    else
      redis.call('ZREM', KEYS[3], holder)
    end
  end
  local keep = hold + granted
  if keep > 0 then
    redis.call('HSET', KEYS[1], holder, keep)
    redis.call('ZADD', KEYS[2], now + lease_ms, holder)
  else
    redis.call('ZREM', KEYS[2], holder)
    if want == 0 then redis.call('ZREM', KEYS[3], holder) end
  end
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], 2 * lease_ms + 10000) end
  local wanting = redis.call('ZRANGE', KEYS[3], 0, -1)
  local without = 0
  for i = 1, #wanting do
    if wanting[i] ~= holder then
      contended = 1
      if redis.call('HEXISTS', KEYS[1], wanting[i]) == 0 then without = without + 1 end
    end
  end
  fair = math.max(1, math.ceil(max / (#counts + 1 + without)))
end
local function reserve(key, per_s, units)
  if per_s <= 0 or units <= 0 then return 0 end
  local start = math.max(tonumber(redis.call('GET', key) or '0'), now)
  local after = start + units * 1000 / per_s
  redis.call('SET', key, string.format('%.3f', after), 'PX', math.ceil(after - now) + 60000)
  return math.floor((start - now) * 1000)
end
local requests_us = reserve(KEYS[4], tonumber(ARGV[6]), tonumber(ARGV[7]))
local cost_us = reserve(KEYS[5], tonumber(ARGV[8]), tonumber(ARGV[9]))
return {granted, fair, contended, requests_us, cost_us}
"""


def budget_keys(name: str) -> list[str]:
    """The Redis keys of budget ``name`` (one hash tag: one slot of a Redis Cluster)."""
    tag = name.replace("{", "(").replace("}", ")")
    prefix = f"asynclookup:budget:{{{tag}}}"
    return [f"{prefix}:{part}" for part in ("leases", "expiry", "wanting", "rate", "cost")]


class RedisBudgetCoordinator(BudgetCoordinator):
    """Budgets kept in one Redis (database, user and password from the URL)."""

    name = "redis-budget"

    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__(config)
        self._redis: Any = None
        self._script: Any = None

    async def open(self) -> None:
        """Make the pool; no connection yet (a coordinator that is down never fails a task)."""
        from redis.asyncio import BlockingConnectionPool, Redis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        assert self.config.url is not None
        pool = BlockingConnectionPool.from_url(
            self.config.url, max_connections=POOL_SIZE, timeout=None, retry=Retry(NoBackoff(), 0)
        )
        self._redis = Redis(connection_pool=pool, decode_responses=False)
        self._script = self._redis.register_script(SCRIPT)  # EVALSHA, EVAL after a restart

    async def close(self) -> None:
        if self._redis is not None:
            redis, self._redis = self._redis, None
            await redis.aclose(close_connection_pool=True)

    async def ask(self, budget: str, limits: BudgetLimits, ask: BudgetAsk) -> BudgetGrant:
        reply = await self._script(
            keys=budget_keys(budget),
            args=[
                ask.holder,
                limits.max_in_flight,
                max(1, round(limits.lease_s * 1000)),
                ask.hold,
                ask.want,
                repr(float(limits.rate)),
                ask.requests,
                repr(float(limits.cost_rate)),
                repr(float(ask.cost)),
                WANTING_MS,
            ],
        )
        granted, fair, contended, requests_us, cost_us = (int(value) for value in reply)
        return BudgetGrant(
            leases=granted,
            fair_share=fair,
            contended=bool(contended),
            requests_delay_s=requests_us / 1e6,
            cost_delay_s=cost_us / 1e6,
        )
