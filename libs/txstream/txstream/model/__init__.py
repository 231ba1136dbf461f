"""What users declare: streams, tables, windows, stored procedures, dataflows."""
