"""Leaderboard Maintenance, the reference workload (S-Store VLDB'15, Sec. 4.1.1).

The contract is `shared/workloads/leaderboard.md`; this package holds its reference data, the
vote generator and the votes-file format, so the runner, the benchmarks and the tests all read
and write votes the same way.
"""

from pathlib import Path

WAREHOUSE_CONFIG = Path(__file__).with_name("warehouse.toml")
"""The Leaderboard's warehouse, for `txstream etl run --config`."""
