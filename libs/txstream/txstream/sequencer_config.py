"""The sequencer's configuration: a TOML file (`--config`), overridden by `TXSTREAM_SEQUENCER_*`.
The library holds it because producers read it too (`BatchProducer.send_events`).

name = "votes-in"
[[routes]]
topic = "raw-votes"          # the user topic, any producer
app = "leaderboard"          # the dataflow app whose border stream it feeds
stream = "votes"
schema = "leaderboard.Vote"  # Avro fullname of one event
batch_id_field = "batch_id"  # or batch_id_header = "...", or policy_events / policy_ms
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from txstream.kafka.topics import AppTopics


class Route(BaseModel, extra="forbid"):
    topic: str
    app: str
    stream: str
    schema_name: str = Field(alias="schema")
    # confluent: Avro in Confluent's wire format, its writer schema from the schema registry
    # (`schema_registry_url`), where the stream's schema is registered as <topic>-value
    format: Literal["json", "avro", "confluent"] = "json"
    batch_id_field: str | None = None
    batch_id_header: str | None = None
    policy_events: int | None = Field(None, gt=0)
    policy_ms: int | None = Field(None, gt=0)
    key_field: str | None = None
    max_events: int = Field(10_000, gt=0)
    max_bytes: int = Field(900_000, gt=0)
    seal_after_ms: int = Field(200, gt=0)
    gate: bool = False  # admit batch b+1 only after the app committed batch b
    # every sealed batch to every partition: the input of a spanning procedure, which each
    # partition engine must see whole and in order (docs/partitioning.md)
    broadcast: bool = False
    # every sealed batch only to the partitions owning a key it declares (the app's
    # `touches`; the sequencer runs with --app), and in each commit a progress mark of the
    # last id to the partitions that did not get it (docs/partitioning.md)
    spanning: bool = False
    # a progress mark to every border partition once every batch up to some id is sent
    # there: what an ordered repartitioned edge downstream needs (docs/partitioning.md)
    progress: bool = False

    @model_validator(mode="after")
    def _one_id_source(self) -> Route:
        sources = [
            name
            for name, value in (
                ("batch_id_field", self.batch_id_field),
                ("batch_id_header", self.batch_id_header),
                ("policy_events/policy_ms", self.policy_events or self.policy_ms),
            )
            if value
        ]
        if len(sources) != 1:
            raise ValueError(
                f"route {self.topic!r}: set exactly one of batch_id_field, batch_id_header,"
                f" or a batching policy (policy_events and/or policy_ms); got {sources or 'none'}"
            )
        return self

    @model_validator(mode="after")
    def _broadcast_has_no_key(self) -> Route:
        if self.broadcast and self.key_field is not None:
            raise ValueError(
                f"route {self.topic!r}: a broadcast route sends every batch to every "
                f"partition, so key_field {self.key_field!r} would place nothing; drop one"
            )
        return self

    @model_validator(mode="after")
    def _spanning_is_placed_by_its_keys(self) -> Route:
        if self.spanning and (self.broadcast or self.key_field is not None or self.progress):
            raise ValueError(
                f"route {self.topic!r}: a spanning route places each batch by the keys it "
                "declares and marks the progress itself: it takes no broadcast, key_field "
                "or progress"
            )
        return self

    @model_validator(mode="after")
    def _progress_needs_client_ids(self) -> Route:
        if self.progress and (self.policy or self.broadcast):
            raise ValueError(
                f"route {self.topic!r}: progress marks say which of the client's batch ids "
                "have reached every partition: they need batch_id_field or batch_id_header, "
                "and a keyed (not broadcast) route"
            )
        return self

    @property
    def policy(self) -> bool:
        return self.batch_id_field is None and self.batch_id_header is None

    @property
    def border_topic(self) -> str:
        return AppTopics(self.app).stream(self.stream)


class SequencerConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TXSTREAM_SEQUENCER_", extra="forbid")

    name: str = "sequencer"
    routes: list[Route] = Field(min_length=1)
    dead_letter_topic: str | None = None
    commit_interval_ms: int = Field(100, gt=0)

    @property
    def dead_letters(self) -> str:
        return self.dead_letter_topic or f"txstream-sequencer-{self.name}.dead_letters"

    @property
    def state_topic(self) -> str:
        return f"txstream-sequencer-{self.name}.state"

    @property
    def group_id(self) -> str:
        return f"txstream-sequencer-{self.name}"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (env_settings, init_settings)  # the environment overrides the file


def load_config(path: Path) -> SequencerConfig:
    """Read `path` (TOML) under environment overrides; errors name the bad setting."""
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: {e}") from e
    return SequencerConfig(**data)
