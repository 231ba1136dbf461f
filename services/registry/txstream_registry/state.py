"""What the registry knows: schemas by id, each subject's versions, compatibility levels.

Pure logic, rebuilt at start-up by applying the log's records in order; a write is planned
here, logged, and only then applied, so the state never holds what the log does not.
As Confluent's registry does, one schema (by its Avro parsing canonical form) has one id
whichever subjects register it, and registering a schema a subject already has returns its
id without a new version.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from fastavro import parse_schema
from fastavro.schema import to_parsing_canonical_form

from txstream.schemas.compatibility import check_compatibility

LEVELS = frozenset(
    {"NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
     "FULL_TRANSITIVE"}
)  # fmt: skip
DEFAULT_LEVEL = "BACKWARD"
Record = dict[str, Any]


class RegistryError(Exception):
    """An answer other than success, with Confluent's HTTP status and error code."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


@dataclass(frozen=True)
class Parsed:
    text: str  # as stored and served: compact JSON
    canonical: str
    schema: Any


def parse(text: str, schema_type: str | None = None, references: Any = None) -> Parsed:
    if schema_type not in (None, "AVRO"):
        raise RegistryError(422, 42201, f"only AVRO schemas are supported, not {schema_type}")
    if references:
        raise RegistryError(422, 42201, "schema references are not supported")
    try:
        doc = json.loads(text)
        schema = parse_schema(doc)
        canonical = to_parsing_canonical_form(doc)
    except Exception as e:  # fastavro raises many kinds for a bad schema
        raise RegistryError(422, 42201, f"Invalid schema: {type(e).__name__}: {e}") from e
    return Parsed(json.dumps(doc, separators=(",", ":")), canonical, schema)


@dataclass
class RegistryState:
    schemas: dict[int, Parsed] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)  # canonical form -> id
    subjects: dict[str, list[int]] = field(default_factory=dict)  # ids by version - 1
    levels: dict[str, str] = field(default_factory=dict)  # subject ("" for global) -> level

    # -- the log --------------------------------------------------------------------------

    def apply(self, record: Record) -> None:
        if record["kind"] == "schema":
            parsed = parse(record["schema"])
            self.schemas[record["id"]] = parsed
            self.ids.setdefault(parsed.canonical, record["id"])
            versions = self.subjects.setdefault(record["subject"], [])
            if record["version"] == len(versions) + 1:
                versions.append(record["id"])
        elif record["kind"] == "config":
            self.levels[record["subject"]] = record["level"]

    def plan_register(self, subject: str, parsed: Parsed) -> tuple[int, Record | None]:
        """(id, the record to log first, or None when the subject has the schema already)."""
        versions = self.subjects.get(subject, [])
        for schema_id in versions:
            if self.schemas[schema_id].canonical == parsed.canonical:
                return schema_id, None
        problems = self.incompatibilities(subject, parsed, versions)
        if problems:
            raise RegistryError(
                409,
                409,
                f"Schema being registered is incompatible with an earlier schema for subject "
                f"'{subject}' ({self.level(subject)}): {'; '.join(problems)}",
            )
        schema_id = self.ids.get(parsed.canonical, max(self.schemas, default=0) + 1)
        record = {"kind": "schema", "subject": subject, "version": len(versions) + 1,
                  "id": schema_id, "schema": parsed.text}  # fmt: skip
        return schema_id, record

    def plan_level(self, subject: str, level: str) -> Record:
        if level not in LEVELS:
            raise RegistryError(
                422, 42203, f"Invalid compatibility level {level!r}: one of {sorted(LEVELS)}"
            )
        return {"kind": "config", "subject": subject, "level": level}

    # -- reads ----------------------------------------------------------------------------

    def level(self, subject: str) -> str:
        return self.levels.get(subject) or self.levels.get("") or DEFAULT_LEVEL

    def schema(self, schema_id: int) -> Parsed:
        found = self.schemas.get(schema_id)
        if found is None:
            raise RegistryError(404, 40403, f"Schema {schema_id} not found")
        return found

    def versions(self, subject: str) -> list[int]:
        versions = self.subjects.get(subject)
        if not versions:
            raise subject_not_found(subject)
        return versions

    def version(self, subject: str, version: str) -> tuple[int, int]:
        """(version, id) of `version`: a number, or latest (or -1)."""
        versions = self.versions(subject)
        if version in ("latest", "-1"):
            return len(versions), versions[-1]
        if not version.isdigit() or not 1 <= int(version) <= len(versions):
            raise RegistryError(404, 40402, f"Version {version} not found.")
        return int(version), versions[int(version) - 1]

    def lookup(self, subject: str, parsed: Parsed) -> tuple[int, int]:
        for n, schema_id in enumerate(self.versions(subject), start=1):
            if self.schemas[schema_id].canonical == parsed.canonical:
                return n, schema_id
        raise RegistryError(404, 40403, "Schema not found")

    def incompatibilities(self, subject: str, parsed: Parsed, against: list[int]) -> list[str]:
        """Why `parsed` may not follow `against` (a subject's versions) at its level."""
        level = self.level(subject)
        if level == "NONE" or not against:
            return []
        earlier = against if level.endswith("_TRANSITIVE") else against[-1:]
        problems: list[str] = []
        for schema_id in earlier:
            old = self.schemas[schema_id].schema
            checks = []
            if level.startswith(("BACKWARD", "FULL")):
                checks.append(("new schema reading old data", parsed.schema, old))
            if level.startswith(("FORWARD", "FULL")):
                checks.append(("old schema reading new data", old, parsed.schema))
            for what, reader, writer in checks:
                verdict = check_compatibility(reader, writer)
                if not verdict.compatible:
                    problems.append(f"{what} (id {schema_id}): {', '.join(verdict.messages)}")
        return problems
