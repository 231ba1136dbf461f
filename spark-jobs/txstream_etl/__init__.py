"""The warehouse ETL: committed txstream topics into Delta tables with Spark (DESIGN 3.7).

Spark-free modules (`plan`, `decode`, `rules`) hold what the Python workers run, so they are
tested without a JVM; `session`, `tables`, `writer`, `job` and `maintenance` drive Spark.
"""
