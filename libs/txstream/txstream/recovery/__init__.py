"""Recovery: changelog (default), strong and weak command logging, and snapshots."""
