"""TPC-C's warehouses, districts, customers, orders and stock as an app: the five
transactions as OLTP procedures, 2PC for remote supply and remote customers."""
