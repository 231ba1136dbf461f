"""What the ETL reads and where each record goes: a picklable plan shipped to Spark workers.

A plan maps every source topic to how its records are decoded: atomic-batch envelopes of a
stream, an app's changelog, or raw events in whatever format clients sent. Sources name
their warehouse tables and the cleaning rule each row must pass, so the Spark side only
routes decoded rows by table.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StreamSource:
    """A stream topic: one Kafka record is one atomic batch `{stream, batch_id, tuples[]}`."""

    stream: str
    schema: str  # the tuple schema's full name
    table: str
    rule: str  # a name in `rules.RULES`
    rename: tuple[tuple[str, str], ...] = ()  # field -> column
    # Earlier versions of the tuple schema that records may carry (`evolution.py`):
    # fingerprint -> `.avsc` JSON, each readable as the current one.
    writers: tuple[tuple[str, str], ...] = ()
    broadcast: bool = False  # a spanning procedure's input: one copy of each batch is read


@dataclass(frozen=True)
class StateTable:
    """One engine table read from the changelog, mirrored into a warehouse table.

    `key_columns` name the parts of the engine key in order; a key longer than that joins its
    remaining parts into the last column with ':'.
    """

    schema: str
    table: str
    key_columns: tuple[str, ...]
    rule: str = "any"
    rename: tuple[tuple[str, str], ...] = ()  # field -> column


@dataclass(frozen=True)
class ChangelogSource:
    """An app's changelog: key (table, *key), value an Avro row or a tombstone."""

    tables: dict[str, StateTable] = field(default_factory=dict)  # engine table -> target


@dataclass(frozen=True)
class RawSource:
    """Raw events from any client (CSV lines, JSON of several dialects), normalized first."""

    table: str
    rule: str = "ingested_vote"


Source = StreamSource | ChangelogSource | RawSource


@dataclass(frozen=True)
class Plan:
    """The sources of one streaming query, by topic, and where their schemas live."""

    schema_dir: str
    sources: dict[str, Source]

    @property
    def topics(self) -> list[str]:
        return sorted(self.sources)
