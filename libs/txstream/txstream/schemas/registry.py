"""Every `.avsc` under one directory, parsed together so files can use each other's named types.

A tuple record may use an enum or record defined in another file, and file names need not
match type names, so files are parsed in whatever order resolves their references. Each
schema handed out carries only the named types it depends on: fastavro copies a schema's whole
named-type table on every read and write, so a registry-wide table would slow every encode.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastavro import parse_schema
from fastavro.schema import SchemaParseException, UnknownType, to_parsing_canonical_form
from fastavro.types import NamedSchemas, Schema

from txstream.config import default_schema_dir

NAMED_TYPES = frozenset({"record", "error", "enum", "fixed"})


class SchemaError(ValueError):
    """A schema, schema file or schema name that cannot be used."""


class SchemaFileError(SchemaError):
    """An `.avsc` file that cannot be read or parsed; the message starts with its path."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path


class UnknownSchemaError(SchemaError):
    """A schema name that no `.avsc` file defines."""


def read_avsc(path: Path) -> Any:
    """The JSON value of an `.avsc` file, or an error naming the file and the position."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SchemaFileError(path, f"cannot read: {e.strerror or e}") from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SchemaFileError(
            path, f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from e


class SchemaRegistry:
    """The schemas of one directory, looked up by full name (`namespace.Name`).

    txstream's own record types (`txstream.*`: envelopes, aborts, commit notices, OLTP
    messages) are always there: an app's own schema directory holds only its schemas."""

    def __init__(self, schema_dir: Path, derived: Mapping[str, Any] | None = None) -> None:
        """`derived`: schemas by full name that no file holds, e.g. an app's, derived from
        its Python record types (`schemas.from_types`)."""
        if not schema_dir.is_dir():
            raise SchemaError(f"schema directory {schema_dir} does not exist")
        self.schema_dir = schema_dir
        files = {p: read_avsc(p) for p in sorted(schema_dir.rglob("*.avsc"))}
        files |= {p: read_avsc(p) for p in _system_files(schema_dir)}
        self._named, self._origin = _parse_together(files, schema_dir)
        extra = {}
        for name, raw in (derived or {}).items():
            if name in self._named:  # a file defines it too: the same record, or refused
                _same_as_file(name, raw, self._named, self._origin[name])
            else:
                extra[_derived_source(name)] = raw
        if extra:  # on top of the files, which are parsed already
            self._named, self._origin = _parse_together(
                extra, schema_dir, (self._named, self._origin)
            )
        self._parsed: dict[str, Schema] = {}

    def names(self) -> list[str]:
        """Full names of every named type (records, enums, fixed), nested ones included."""
        return sorted(self._named)

    def origin(self, fullname: str) -> Path:
        """The file that defines `fullname`."""
        self._definition(fullname)
        return self._origin[fullname]

    def get(self, fullname: str) -> Schema:
        """The parsed fastavro schema of `fullname`, ready for schemaless reads and writes."""
        parsed = self._parsed.get(fullname)
        if parsed is None:
            parsed = standalone(self._definition(fullname), self._named)
            self._parsed[fullname] = parsed
        return parsed

    def parse(self, raw: Any, source: Path | str) -> Schema:
        """Parse a schema from outside the directory (`source` names it in errors).

        Its references resolve against this registry, and its own definitions take precedence,
        so an older version of a registered schema parses as itself.
        """
        named = dict(self._named)
        return standalone(_parse_one(raw, source, named, self.schema_dir), named)

    def _definition(self, fullname: str) -> dict[str, Any]:
        try:
            return self._named[fullname]
        except KeyError:
            close = difflib.get_close_matches(fullname, self._named, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UnknownSchemaError(
                f"unknown schema {fullname!r}: no .avsc under {self.schema_dir} defines it{hint}"
            ) from None


def _system_files(schema_dir: Path) -> list[Path]:
    """txstream's own schema files, unless `schema_dir` is their home or defines them."""
    home = default_schema_dir()
    if home.resolve() == schema_dir.resolve():
        return []
    system = [*home.glob("txstream.*.avsc"), *(home / "txstream").rglob("*.avsc")]
    return [p for p in sorted(system) if not (schema_dir / p.relative_to(home)).exists()]


def load_avsc(path: Path, registry: SchemaRegistry | None = None) -> Schema:
    """Parse one `.avsc` file; references to other types resolve against `registry` if given."""
    raw = read_avsc(path)
    if registry is not None:
        return registry.parse(raw, path)
    named: NamedSchemas = {}
    return standalone(_parse_one(raw, path, named, None), named)


def standalone(definition: Schema, named: NamedSchemas) -> Schema:
    """`definition` parsed with exactly the named types it depends on."""
    return parse_schema(definition, dependencies(definition, named))


def dependencies(schema: Schema, named: NamedSchemas) -> NamedSchemas:
    """The named types `schema` refers to, directly or through other named types."""
    found: NamedSchemas = {}

    def visit(s: Schema) -> None:
        if isinstance(s, str):
            if s in named and s not in found:
                found[s] = named[s]
                visit(named[s])
        elif isinstance(s, list):
            for branch in s:
                visit(branch)
        elif isinstance(s, dict):
            if s.get("type") in NAMED_TYPES:
                found.setdefault(s["name"], named.get(s["name"], s))
            for key in ("items", "values"):
                if key in s:
                    visit(s[key])
            for field in s.get("fields", ()):
                visit(field["type"])

    visit(schema)
    return found


def to_avsc(schema: Schema) -> Any:
    """A parsed schema as self-contained `.avsc` JSON, e.g. for Spark or Apache Avro.

    Each named type is defined inline where it is first used and referenced by name after.
    """
    named: NamedSchemas = schema.get("__named_schemas", {}) if isinstance(schema, dict) else {}
    defined: set[str] = set()

    def inline(s: Schema) -> Any:
        if isinstance(s, str):
            if s in named and s not in defined:
                return inline(named[s])
            return s
        if isinstance(s, list):
            return [inline(branch) for branch in s]
        out = {k: v for k, v in s.items() if not k.startswith("__")}
        if out["type"] in NAMED_TYPES:
            defined.add(out["name"])
            if "." not in out["name"]:
                # A null-namespace type nested in a namespaced one must say so explicitly.
                out["namespace"] = ""
        for key in ("items", "values"):
            if key in out:
                out[key] = inline(out[key])
        if "fields" in out:
            out["fields"] = [{**f, "type": inline(f["type"])} for f in out["fields"]]
        return out

    return inline(schema)


def _parse_one(
    raw: Any, source: Path | str, named: NamedSchemas, schema_dir: Path | None
) -> Schema:
    """Parse `raw` into `named` (which gains its definitions), naming `source` on failure."""
    try:
        return parse_schema(raw, named, _write_hint=False)
    except UnknownType as e:
        where = f" nor under {schema_dir}" if schema_dir else ""
        raise SchemaFileError(
            source, f"unknown type {e.name!r}: not defined in this file{where}"
        ) from e
    except (SchemaParseException, KeyError, TypeError, ValueError, AttributeError) as e:
        raise SchemaFileError(source, f"invalid Avro schema: {e}") from e


def _same_as_file(name: str, raw: Any, named: NamedSchemas, path: Path) -> None:
    """A derived schema may repeat a file's only as the same record (docs aside), so an
    app can move from `.avsc` files to Python types with its wire format unchanged."""
    others = {n: s for n, s in named.items() if n != name}
    mine = parse_schema(raw, others, _write_hint=False)
    if to_parsing_canonical_form(mine) != to_parsing_canonical_form(standalone(named[name], named)):
        raise SchemaFileError(
            _derived_source(name), f"redefines {name}, already defined in {path}, differently"
        )


def _derived_source(name: str) -> Path:
    """Where a derived schema comes from, as errors and `origin` name it."""
    return Path(f"<{name}: derived from a Python type>")


def _parse_together(
    files: dict[Path, Any],
    schema_dir: Path,
    parsed: tuple[NamedSchemas, dict[str, Path]] = ({}, {}),
) -> tuple[NamedSchemas, dict[str, Path]]:
    """Parse every file, retrying those whose references are defined by files not yet
    parsed; on top of `parsed` (named types and their origins) when given."""
    named: NamedSchemas = dict(parsed[0])
    origin: dict[str, Path] = dict(parsed[1])
    pending = list(files)
    while pending:
        waiting: dict[Path, str] = {}
        for path in pending:
            trial = dict(named)
            try:
                parse_schema(files[path], trial, _write_hint=False)
            except UnknownType as e:
                waiting[path] = e.name
                continue
            except (SchemaParseException, KeyError, TypeError, ValueError, AttributeError) as e:
                raise SchemaFileError(path, f"invalid Avro schema: {e}") from e
            for name, definition in trial.items():
                if named.get(name) is definition:
                    continue
                if name in origin:
                    raise SchemaFileError(
                        path, f"redefines {name}, already defined in {origin[name]}"
                    )
                origin[name] = path
            named = trial
        if len(waiting) == len(pending):
            path, name = next(iter(waiting.items()))
            raise SchemaFileError(
                path, f"unknown type {name!r}: no .avsc under {schema_dir} defines it"
            )
        pending = list(waiting)
    return named, origin
