"""The worker: a long-running process hosting partition engines of one app."""
