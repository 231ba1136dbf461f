"""Remove a run's topics from the shared broker, so repeated benchmarks leave nothing behind."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from txstream.config import Settings
from txstream.kafka.admin import KafkaAdminError, TopicAdmin


def delete_topics_with(settings: Settings, prefixes: Iterable[str]) -> None:
    """Delete every topic whose name starts with one of `prefixes`, or contains one (Quix
    names its changelog topics `changelog__<group>--...`)."""
    tags = [p for p in prefixes if p]
    admin = TopicAdmin(settings)
    names = [t for t in admin.list_topics() if any(tag in t for tag in tags)]
    try:
        admin.delete_topics(names)
    except KafkaAdminError as e:
        print(f"warning: {e}", file=sys.stderr)
