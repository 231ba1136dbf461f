"""The spanning exchange's sending side: this engine's reads for other engines' batches.

Reads go out at once, outside the group's transaction, on an idempotent producer of their
own: the other engines wait for them, and they are a function of the input alone, so a
restarted engine sends the same again and the receivers drop the repeat.
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import Producer

from txstream.config import Settings
from txstream.engine.spanning import Reads
from txstream.kafka.clients import DeliveryLatch, idempotent_producer_config, send
from txstream.state.reads_codec import ReadsCodec

# Room left in a record for the reads' envelope.
ENVELOPE_BYTES = 1024
FLUSH_S = 60


class ExchangeSender:
    def __init__(self, settings: Settings, topic: str, codec: ReadsCodec) -> None:
        self.topic = topic
        self.codec = codec
        self.max_bytes = settings.kafka_max_record_bytes - ENVELOPE_BYTES
        self.producer = Producer({**idempotent_producer_config(settings), "linger.ms": 0})
        self.failures = DeliveryLatch()

    def send(self, outbox: Iterable[tuple[int, Reads]]) -> None:
        """Send each (engine, reads) to that engine's partition of the exchange, the reads
        for one engine packed into as few records as fit (`ReadsCodec.pack`)."""
        self.failures.check("spanning reads")
        per_engine: dict[int, list[bytes]] = {}
        encoded: dict[int, list[bytes]] = {}  # id(Reads) -> its records: one batch's reads
        for q, reads in outbox:  # go to each other participant alike, encoded once
            records = encoded.get(id(reads))
            if records is None:
                records = encoded[id(reads)] = self.codec.encode(reads, self.max_bytes)
            per_engine.setdefault(q, []).extend(records)
        for q, records in per_engine.items():
            for value in self.codec.pack(records, self.max_bytes):
                send(self.producer, self.topic, value, partition=q, on_delivery=self.failures)
        self.producer.poll(0)

    def delivered(self) -> None:
        """Every read sent is acknowledged, or this raises: a group that completes a
        spanning batch must not commit while this engine's reads for it could still be
        lost, since after the commit it would never send them again."""
        if self.producer.flush(FLUSH_S) != 0:
            raise RuntimeError(f"spanning reads not delivered within {FLUSH_S} s")
        self.failures.check("spanning reads")

    def close(self) -> None:
        self.producer.flush(5)
