"""txstream: transactional stream processing (the S-Store model) on Kafka."""

__version__ = "0.1.0"
