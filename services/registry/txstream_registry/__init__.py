"""txstream's schema registry: the Confluent Schema Registry API over a Kafka topic."""
