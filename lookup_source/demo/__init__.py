"""The demo: a side-by-side comparison over the embedded user-profile HTTP service
(:mod:`lookup_source.service`)."""
