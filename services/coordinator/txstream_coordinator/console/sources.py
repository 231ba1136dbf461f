"""Where the console's figures come from, each read where it already lives.

Rates and latencies are Prometheus's (the workers' `txstream_te_seconds` histograms), so the
console shows what the dashboards and alerts see; open 2PC transactions are the active
coordinator's own state machine; dead letters are the newest committed records of the
app's abort topic; the graph is `txstream describe`'s, drawn by Graphviz.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from fastavro.types import Schema

from txstream.config import Settings
from txstream.kafka.clients import read_committed_consumer_config
from txstream.schemas.records import decode_record
from txstream_coordinator.coordinator import Coordinator


class SourceError(RuntimeError):
    """A source the console reads is not there; the message says which, and why."""


def open_transactions(machine: Coordinator | None, now: float) -> list[dict[str, Any]]:
    """The 2PC transactions begun and not yet ended, oldest first. Read from the serving
    thread's machine without a lock: a list of its values is taken in one step, and a
    transaction changed meanwhile shows the state of a moment either side."""
    if machine is None:
        return []
    rows = []
    for t in list(machine.active.values()):
        yes = sorted(p for p, v in list(t.votes.items()) if v.ok)
        rows.append(
            {
                "txn_id": t.txn_id,
                "participants": list(t.participants),
                "voted_yes": yes,
                "decision": None if t.commit is None else ("commit" if t.commit else "abort"),
                "acknowledged": sorted(t.acks),
                "timeout_in_s": round(t.deadline - now, 1),
            }
        )
    return rows


class Prometheus:
    """Instant queries against Prometheus's HTTP API."""

    def __init__(self, url: str, timeout_s: float = 3.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def query(self, expr: str) -> list[dict[str, Any]]:
        address = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        try:
            with urllib.request.urlopen(address, timeout=self.timeout_s) as answer:
                doc = json.loads(answer.read())
        except (OSError, ValueError) as e:
            raise SourceError(f"Prometheus at {self.url} did not answer: {e}") from e
        if doc.get("status") != "success":
            raise SourceError(f"Prometheus at {self.url} refused {expr!r}: {doc.get('error')}")
        result: list[dict[str, Any]] = doc["data"]["result"]
        return result

    def by_label(self, expr: str, label: str) -> dict[str, float]:
        out = {}
        for series in self.query(expr):
            value = float(series["value"][1])
            if value == value:  # NaN: no observation in the range
                out[series["metric"].get(label, "")] = value
        return out


def procedure_figures(prom: Prometheus, app: str, window: str = "1m") -> list[dict[str, Any]]:
    """Per procedure, over the last `window`: TEs per second and p50/p99 latency (ms)."""
    sel = f'app="{app}"'
    rates = prom.by_label(
        f"sum by (procedure) (rate(txstream_te_seconds_count{{{sel}}}[{window}]))", "procedure"
    )
    quantiles = {
        q: prom.by_label(
            f"histogram_quantile({q}, sum by (procedure, le) "
            f"(rate(txstream_te_seconds_bucket{{{sel}}}[{window}])))",
            "procedure",
        )
        for q in ("0.5", "0.99")
    }
    return [
        {
            "procedure": name,
            "tes_per_s": round(rate, 2),
            "p50_ms": _ms(quantiles["0.5"].get(name)),
            "p99_ms": _ms(quantiles["0.99"].get(name)),
        }
        for name, rate in sorted(rates.items())
    ]


def commit_figures(prom: Prometheus, app: str, window: str = "1m") -> dict[str, Any]:
    """The app's committed input batches per second and group-commit p99 (ms)."""
    sel = f'app="{app}"'
    batches = prom.by_label(f"sum(rate(txstream_batches_committed_total{{{sel}}}[{window}]))", "")
    p99 = prom.by_label(
        f"histogram_quantile(0.99, sum by (le) "
        f"(rate(txstream_group_commit_seconds_bucket{{{sel}}}[{window}])))",
        "",
    )
    return {
        "batches_per_s": round(batches.get("", 0.0), 2),
        "commit_p99_ms": _ms(p99.get("")),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def dead_letters(
    settings: Settings, topic: str, schema: Schema, limit: int, timeout_s: float = 10.0
) -> list[dict[str, Any]]:
    """The newest `limit` committed records of `topic`, newest first, each with when it
    was written; a record that does not decode is shown as such, not skipped."""
    conf = read_committed_consumer_config(settings, f"console-{uuid.uuid4().hex}")
    conf["enable.partition.eof"] = True
    consumer = Consumer(conf)
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None:
            raise SourceError(f"topic {topic} cannot be read: {getattr(meta, 'error', None)}")
        assigned = []
        for p in meta.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout_s)
            if high > low:
                assigned.append(TopicPartition(topic, p, max(low, high - limit)))
        records = _read_all(consumer, assigned, schema, time.monotonic() + timeout_s)
    finally:
        consumer.close()
    records.sort(key=lambda r: r["written_ms"], reverse=True)
    return records[:limit]


def _read_all(
    consumer: Consumer, assigned: list[TopicPartition], schema: Schema, deadline: float
) -> list[dict[str, Any]]:
    if not assigned:
        return []
    consumer.assign(assigned)
    left = {tp.partition for tp in assigned}
    out: list[dict[str, Any]] = []
    while left and time.monotonic() < deadline:
        for msg in consumer.consume(500, timeout=0.2):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    left.discard(msg.partition())
                    continue
                raise SourceError(f"reading {msg.topic()}: {err}")
            try:
                record = dict(decode_record(schema, msg.value() or b""))
            except Exception as e:  # shown, not hidden: this is where bad records go
                record = {"reason": "undecodable dead letter", "error": str(e)}
            record["written_ms"] = msg.timestamp()[1]
            record["partition"] = msg.partition()
            out.append(record)
    return out


def graph_svg(dot_source: str, timeout_s: float = 20.0) -> bytes:
    """The dataflow drawn by Graphviz's `dot`."""
    dot = shutil.which("dot")
    if dot is None:
        raise SourceError("Graphviz's dot is not installed (Debian: apt-get install graphviz)")
    done = subprocess.run(
        [dot, "-Tsvg"], input=dot_source.encode(), capture_output=True, timeout=timeout_s
    )
    if done.returncode != 0:
        raise SourceError(f"dot failed: {done.stderr.decode(errors='replace')[-500:]}")
    return done.stdout
