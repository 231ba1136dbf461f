"""The native local stack: processes started from our own scripts, tracked by pidfiles."""
