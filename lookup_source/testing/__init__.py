"""Test support for connector authors: the contract suite every connector runs
(:mod:`lookup_source.testing.contract`). Needs pytest."""
