"""Border input batches (and coordinator messages) by offset, for replay: the input topics
are the upstream backup.

Replay asks for offsets in rising order per topic, so each topic is read once, forward,
from the first offset the log names.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from confluent_kafka import Message

from txstream.config import Settings
from txstream.kafka.read import read_to_committed_end
from txstream.schemas.codec import Batch, BatchCodec


class RecoveryError(RuntimeError):
    """State cannot be rebuilt from what is stored; the message says what is missing."""


class BorderSources:
    def __init__(self, settings: Settings, partition: int, codecs: Mapping[str, BatchCodec]):
        self.settings = settings
        self.partition = partition
        self.codecs = codecs  # by topic
        self._readers: dict[str, Iterator[Message]] = {}
        self._last: dict[str, tuple[int, bytes]] = {}

    def get(self, topic: str, offset: int) -> Batch:
        return self.codecs[topic].decode(self.raw(topic, offset))

    def raw(self, topic: str, offset: int) -> bytes:
        """The record value at `offset`: a batch, or a coordinator request or decision."""
        last = self._last.get(topic)
        if last is not None and last[0] == offset:
            return last[1]
        reader = self._readers.get(topic)
        if reader is None or (last is not None and last[0] > offset):
            reader = read_to_committed_end(self.settings, topic, self.partition, offset)
            self._readers[topic] = reader
        for msg in reader:
            at = msg.offset() or 0
            if at == offset:
                value = msg.value()
                if value is None:
                    break
                self._last[topic] = (at, value)
                return value
            if at > offset:
                break
        raise RecoveryError(
            f"{topic}[{self.partition}] no longer holds offset {offset}, which the command log "
            "names: input retention must outlast the time between snapshots"
        )
