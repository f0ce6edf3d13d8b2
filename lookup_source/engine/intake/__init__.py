"""A batch on its way in: the input batch and its requests (:mod:`.batches`), its distinct keys
(:mod:`.keys`), what the caches and the shared tier already know of them
(:mod:`.known_answers`) and the keys another request already asks (:mod:`.inflight`)."""
