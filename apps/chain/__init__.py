"""S-Store's PE-trigger chain micro-benchmark: n stored procedures, each triggering the next."""
