"""Tables for the console, followed from the app's changelog.

The changelog holds every committed write of every table (the Kafka transaction that
commits a group carries its changelog records), so a read_committed consumer of it, applied
in order, holds the committed state: the same view the warehouse ETL loads. This needs no
engine to answer, so it shows the tables of any app that recovers from its changelog,
OLTP transactions or not; it costs one consumer per table shown, and the table's rows in
memory.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from txstream.config import Settings
from txstream.kafka.clients import read_committed_consumer_config
from txstream.model.declarations import Key, Record
from txstream.state.codec import StateCodec

POLL_S = 0.5


class TableTail:
    """One table's committed rows, kept current by a daemon thread reading the changelog."""

    def __init__(self, settings: Settings, topic: str, codec: StateCodec, table: str) -> None:
        self.topic, self.table = topic, table
        self._codec = codec
        self._prefix = codec.prefix(table, ())
        self._rows: dict[Key, Record] = {}
        self._lock = threading.Lock()
        self.caught_up = threading.Event()  # every partition read to its committed end once
        self.error: str | None = None
        self._stop = threading.Event()
        conf = read_committed_consumer_config(settings, f"console-{uuid.uuid4().hex}")
        conf["enable.partition.eof"] = True
        self._consumer = Consumer(conf)
        self._thread = threading.Thread(target=self._run, name=f"tail-{table}", daemon=True)
        self._thread.start()

    def rows(self) -> list[tuple[Key, Record]]:
        with self._lock:
            return list(self._rows.items())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        try:
            self._follow()
        except Exception as e:  # shown by the console; the thread has nothing else to tell
            self.error = f"reading {self.topic} for table {self.table}: {e}"
        finally:
            self._consumer.close()

    def _follow(self) -> None:
        meta = self._consumer.list_topics(self.topic, timeout=30).topics.get(self.topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise RuntimeError(f"no such topic ({getattr(meta, 'error', None)})")
        behind = set(meta.partitions)
        self._consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in behind])
        while not self._stop.is_set():
            for msg in self._consumer.consume(1000, timeout=POLL_S):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(str(err))
                    behind.discard(msg.partition())
                    if not behind:
                        self.caught_up.set()
                    continue
                key = msg.key()
                if key is not None and key.startswith(self._prefix):
                    self._apply(key, msg.value())

    def _apply(self, key: bytes, value: bytes | None) -> None:
        _, k = self._codec.describe(key)
        row = None if value is None else self._codec.decode_entry(key, value)[2]
        with self._lock:
            if row is None:
                self._rows.pop(k, None)
            else:
                self._rows[k] = row


def ordered(
    rows: Sequence[tuple[Key, Record]], sort: str | None, descending: bool, limit: int
) -> list[tuple[Key, Record]]:
    """The first `limit` rows by column `sort` (by key when None); rows without the column,
    or whose value does not compare with the others', go last."""
    if sort is None:
        try:
            return sorted(rows, key=lambda kr: kr[0], reverse=descending)[:limit]
        except TypeError:  # keys of mixed types
            return sorted(rows, key=lambda kr: str(kr[0]), reverse=descending)[:limit]
    having = [(k, r) for k, r in rows if r.get(sort) is not None]
    others = [(k, r) for k, r in rows if r.get(sort) is None]
    try:
        having.sort(key=lambda kr: kr[1][sort], reverse=descending)
    except TypeError:
        having.sort(key=lambda kr: str(kr[1][sort]), reverse=descending)
    return (having + others)[:limit]


def as_json(rows: Sequence[tuple[Key, Record]]) -> list[list[Any]]:
    return [[list(k), dict(r)] for k, r in rows]
