"""The exactly-once commit path: group commit in Kafka transactions, then RocksDB; restore."""
