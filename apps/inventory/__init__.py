"""An inventory of items stocked at many sites: reservations promised (BASIC) against an
aggregation constraint, and the same reservations through 2PC, for comparison."""
