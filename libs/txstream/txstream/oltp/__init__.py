"""OLTP transactions and queries: wire messages, key routing, the client, predicates."""
