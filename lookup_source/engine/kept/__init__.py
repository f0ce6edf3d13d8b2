"""What a Python worker keeps from task to task, and its one owner (:mod:`.worker`): a task's
share of it opened and handed back in one piece (:mod:`.task_resources`); the kept clients and
their loops (:mod:`.clients`); the caches and hedging windows (:mod:`.caches`, :mod:`.cache`,
:mod:`.cache_layer`, :mod:`.cached_rows`; a full cache's loads: :mod:`.table_load`); the shared
tier (:mod:`.shared_cache`, :mod:`.shared_values`); the lookup's identity that keys all of
them (:mod:`.identity`, :mod:`.function_state`); the collector's threshold
(:mod:`.gc_tuning`)."""
