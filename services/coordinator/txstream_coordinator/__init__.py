"""The transaction coordinator: OLTP transactions, 2PC across partition engines, queries."""
