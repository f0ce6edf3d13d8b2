"""The request path: one request to the store, from its slot (:mod:`.slots`, under
:mod:`.limit`) and its pacing (:mod:`.pacing`: :mod:`.rate_limit`, the cluster budget of
:mod:`.budget` and :mod:`.budget_share`) through its attempts (:mod:`.executor`, following
:mod:`.retry`, within :mod:`.deadline`, hedged by :mod:`.hedge`) to its answer
(:mod:`.answers`)."""
