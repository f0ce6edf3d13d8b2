"""The Spark layer: the ``asynclookup`` data source, ``lookup_join``, SQL, and the metrics
accumulator. It builds the lookup plan on the driver and runs the engine in each task."""
