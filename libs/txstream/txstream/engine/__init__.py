"""The partition engine: serial transaction executions, write sets, triggers, group commit."""
