"""`python -m txstream_etl`: the `etl` commands without the rest of `txstream`, as the
first driver starts the second (`drivers.py`)."""

from txstream_etl.cli import app

app()
