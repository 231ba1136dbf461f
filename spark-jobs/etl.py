"""spark-submit entry point: `spark-submit spark-jobs/etl.py run --app NAME` (or `maintain`).

The same commands as `txstream etl`; the package lives beside this file.
"""

from txstream_etl.cli import main

if __name__ == "__main__":
    main()
