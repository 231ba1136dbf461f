"""The `txstream` command-line tool."""
