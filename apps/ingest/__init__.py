"""Dirty ingestion: raw vote events in several formats, normalized before the warehouse."""
