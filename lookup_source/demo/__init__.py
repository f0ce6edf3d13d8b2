"""The demo: an embedded user-profile HTTP service and a side-by-side comparison."""
