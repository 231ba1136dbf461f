"""Remove a run's topics from the shared broker, so repeated benchmarks leave nothing behind."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from txstream.config import Settings
from txstream.kafka.admin import TopicAdmin
from txstream.kafka.clients import common_config


def delete_topics_with(settings: Settings, prefixes: Iterable[str]) -> None:
    """Delete every topic whose name starts with one of `prefixes`, or contains one (Quix
    names its changelog topics `changelog__<group>--...`)."""
    tags = [p for p in prefixes if p]
    names = [t for t in TopicAdmin(settings).list_topics() if any(tag in t for tag in tags)]
    if not names:
        return
    admin = AdminClient(common_config(settings))
    for name, future in admin.delete_topics(names, operation_timeout=30).items():
        try:
            future.result()
        except KafkaException as e:
            print(f"warning: could not delete topic {name}: {e}", file=sys.stderr)
