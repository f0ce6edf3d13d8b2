"""The output path: the queues that keep the output's order (:mod:`.queue`), what follows an
answer (:mod:`.builder`: ``on.error``, ``lookup.max-matches``, failed rows), the input rows
joined to their matches (:mod:`.joined_rows`; a scan's rows: :mod:`.scan_rows`) and the side
that hands the rows out (:mod:`.emitter`)."""
