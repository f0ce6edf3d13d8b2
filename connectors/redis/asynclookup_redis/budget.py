"""A cluster budget's coordinator on Redis (``budget.url=redis://...``, ``rediss://`` for TLS).

Each call is one Lua script, atomic on the server, timed by the server's own clock (``TIME``),
so the clocks of the executors never matter. A budget ``name`` lives under five keys, which
share a hash tag (the name's UTF-8 in hex, so any name is its own keys) and expire when
nobody uses the budget:

- ``asynclookup:budget:{name}:leases`` (hash holder -> leases) and ``...:expiry`` (sorted set
  holder -> when its leases lapse): leases in flight; a holder that stops calling (a killed
  worker) loses its leases ``lease_s`` after its last call;
- ``...:wanting`` (sorted set holder -> until when): holders refused leases lately; while
  there are any, no holder is granted beyond its fair share (the budget over the holders,
  rounded up), and each gives back what it holds beyond it;
- ``...:rate`` and ``...:cost``: the next free request slot and cost unit (server time in ms);
  a reservation of ``n`` takes the ``n`` slots from there (or from the time the holder's
  answer takes to reach it, ``ahead``, if that is later), one every ``1 / rate`` seconds, so
  the same slot is never given twice; one call reserves at most a minute of budget;
- ``...:rate-gap`` and ``...:cost-gap``: the time an ask ahead passed over (``from to``, ms):
  a later reservation that fits in it is taken there, so that time is not lost;
- ``...:limits``: the budget's limits, set by its first caller: a call with other limits is
  refused (:class:`BudgetConflictError`, naming them), so no lookup can widen a budget others
  rely on.

A holder keeps at most the leases the budget knows it has; one the budget does not know (its
leases lapsed while its worker stood still, or Redis restarted and every count is gone) keeps
only what is free, and is told how many it holds. Whatever is stored is read as a number or 0,
never an error (a value written by someone else can restart the pacing from now, as deleting
the keys would; a gap never reaches past the next free slot). A standalone Redis or a Sentinel
primary; not a Redis Cluster (its client is not a cluster client). One pool of at most 4
connections per worker.
"""

from __future__ import annotations

from typing import Any

from lookup_source.connector_api import (
    BudgetAsk,
    BudgetConflictError,
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
local function num(value)  -- a number given or stored; anything else (garbage, < 0, inf) is 0
  local n = tonumber(value)
  if n == nil or n ~= n or n < 0 or n == math.huge then return 0 end
  return n
end
local holder = ARGV[1]
local max, lease_ms, hold, want = num(ARGV[2]), num(ARGV[3]), num(ARGV[4]), num(ARGV[5])
local rate, requests = num(ARGV[6]), num(ARGV[7])
local cost_rate, cost = num(ARGV[8]), num(ARGV[9])
local wanting_ms, most_ms = num(ARGV[10]), num(ARGV[11])
local ahead_ms = math.min(num(ARGV[12]), most_ms)
if (rate > 0 and requests * 1000 / rate > most_ms)
    or (cost_rate > 0 and cost * 1000 / cost_rate > most_ms) then
  return redis.error_reply('ASYNCLOOKUP_TOO_MUCH one call reserves at most a minute of budget')
end
local ttl = math.ceil(2 * lease_ms + 10000)
local limits = string.format('%d %.6g %.6g', max, rate, cost_rate)
local kept_limits = redis.call('GET', KEYS[6])
if kept_limits and kept_limits ~= limits then
  return redis.error_reply('ASYNCLOOKUP_LIMITS ' .. kept_limits)
end
redis.call('SET', KEYS[6], limits, 'PX', ttl + 60000)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local granted, fair, contended, kept = 0, 0, 0, 0
if max > 0 then
  local lapsed = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
  for i = 1, #lapsed do redis.call('HDEL', KEYS[1], lapsed[i]) end
  if #lapsed > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  local had = redis.call('HGET', KEYS[1], holder)
  redis.call('HDEL', KEYS[1], holder)
  local counts = redis.call('HVALS', KEYS[1])
  local total = 0
  for i = 1, #counts do total = total + num(counts[i]) end
  local wanting = redis.call('ZRANGE', KEYS[3], 0, -1)
  local without = 0
  for i = 1, #wanting do
    if wanting[i] ~= holder then
      contended = 1
      if redis.call('HEXISTS', KEYS[1], wanting[i]) == 0 then without = without + 1 end
    end
  end
  fair = math.max(1, math.ceil(max / (#counts + 1 + without)))
  -- never more than it had; a holder the budget does not know (its leases lapsed, Redis
  -- restarted) keeps only what is free
  if had then
    kept = math.min(hold, num(had))
  else
    kept = math.min(hold, math.max(0, max - total))
  end
  if want > 0 then
    local free = max - total - kept
    if contended == 1 then free = math.min(free, fair - kept) end
    granted = math.max(0, math.min(want, free))
    if granted < want then
      redis.call('ZADD', KEYS[3], now + wanting_ms, holder)
    else
      redis.call('ZREM', KEYS[3], holder)
    end
  end
  if kept + granted > 0 then
    redis.call('HSET', KEYS[1], holder, kept + granted)
    redis.call('ZADD', KEYS[2], now + lease_ms, holder)
  else
    redis.call('ZREM', KEYS[2], holder)
    if want == 0 then redis.call('ZREM', KEYS[3], holder) end
  end
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ttl) end
end
local function reserve(key, gap_key, per_s, units)
  if per_s <= 0 or units <= 0 then return 0 end
  local span, earliest = units * 1000 / per_s, now + ahead_ms
  local free = num(redis.call('GET', key))
  local gap_from, gap_to = 0, 0
  local gap = redis.call('GET', gap_key)
  if gap then  -- never past the next free slot, whatever is stored
    local a, b = string.match(gap, '^(%S+) (%S+)$')
    gap_from, gap_to = math.max(num(a), now), math.min(num(b), free)
  end
  local from = math.max(gap_from, earliest)
  local start
  if from + span <= gap_to then  -- it fits in the time an ask ahead left free: taken there
    start, gap_from = from, from + span
  else
    start = math.max(free, earliest)
    local after = start + span
    redis.call('SET', key, string.format('%.3f', after), 'PX', math.ceil(after - now) + 60000)
    if start > math.max(free, now) then  -- asked ahead: the time before it stays free
      gap_from, gap_to = math.max(free, now), start
    end
  end
  if gap_to > gap_from then
    redis.call('SET', gap_key, string.format('%.3f %.3f', gap_from, gap_to), 'PX',
      math.ceil(gap_to - now) + 1)
  elseif gap then
    redis.call('DEL', gap_key)
  end
  return math.floor((start - now) * 1000)
end
local requests_us = reserve(KEYS[4], KEYS[7], rate, requests)
local cost_us = reserve(KEYS[5], KEYS[8], cost_rate, cost)
return {granted, fair, contended, requests_us, cost_us, kept + granted, string.format('%.3f', now)}
"""


MOST_MS = 60_000
"""The most budget time one call may reserve (a request costing more than a minute of
``budget.cost-per-minute`` never fits)."""

PARTS = ("leases", "expiry", "wanting", "rate", "cost", "limits", "rate-gap", "cost-gap")


def budget_keys(name: str) -> list[str]:
    """The Redis keys of budget ``name``: its UTF-8 in hex, so any name is its own keys."""
    prefix = f"asynclookup:budget:{{{name.encode('utf-8', 'surrogateescape').hex()}}}"
    return [f"{prefix}:{part}" for part in PARTS]


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
        from redis.exceptions import ResponseError

        try:
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
                    MOST_MS,
                    repr(max(0.0, float(ask.ahead_s)) * 1000.0),
                ],
            )
        except ResponseError as exc:
            conflict = _conflict(budget, limits, str(exc))
            if conflict is None:
                raise
            raise conflict from None
        granted, fair, contended, requests_us, cost_us, held = (int(v) for v in reply[:6])
        return BudgetGrant(
            leases=granted,
            fair_share=fair,
            contended=bool(contended),
            requests_delay_s=requests_us / 1e6,
            cost_delay_s=cost_us / 1e6,
            held=held,
            clock_s=float(reply[6]) / 1000.0,  # the server's time (ms) the delays count from
        )


def _conflict(budget: str, limits: BudgetLimits, message: str) -> BudgetConflictError | None:
    """The script's refusal as an error naming the options to fix, or None (another error)."""
    if message.startswith("ASYNCLOOKUP_LIMITS "):
        try:
            kept_max, kept_rate, kept_cost = message.split()[1:4]
        except ValueError:
            kept_max = kept_rate = kept_cost = "?"
        kept_cost_min = _per_minute(kept_cost)
        return BudgetConflictError(
            f"budget {budget!r} is kept with budget.max-in-flight={kept_max}, "
            f"budget.rate={kept_rate}, budget.cost-per-minute={kept_cost_min} by the lookups "
            f"that use it; this one gives {limits.max_in_flight}, {limits.rate:g} and "
            f"{limits.cost_rate * 60:g}: give the same limits, or another budget.name (a "
            "budget's limits change once nothing has used it for 2 x budget.lease.ms + 10 s)"
        )
    if message.startswith("ASYNCLOOKUP_TOO_MUCH"):
        return BudgetConflictError(
            f"budget {budget!r}: one request costs more than a minute of the budget "
            "(budget.cost-per-minute, with costs from budget.cost.column): it could never be "
            "sent within the budget"
        )
    return None


def _per_minute(per_second: str) -> str:
    try:
        return f"{float(per_second) * 60:g}"
    except ValueError:
        return per_second
