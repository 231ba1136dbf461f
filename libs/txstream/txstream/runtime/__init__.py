"""A partition engine wired to Kafka and RocksDB (the task), and a plain consumer loop for it."""
