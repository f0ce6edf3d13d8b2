"""Benchmarks: asynclookup against the alternatives, in one run."""
