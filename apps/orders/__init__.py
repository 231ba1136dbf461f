"""The order pipeline: orders, restocks and top-ups over stock and accounts kept on
different partitions (docs/workloads.md)."""
