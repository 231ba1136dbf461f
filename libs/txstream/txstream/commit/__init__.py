"""The exactly-once protocol: one Kafka transaction per group commit, then RocksDB."""
