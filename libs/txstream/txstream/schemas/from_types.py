"""Avro record schemas derived from Python types: a `TypedDict` or a dataclass.

Records stay plain dicts at run time; only the schema comes from the class. A field's
annotation maps to Avro as follows: `int` long (`Int32` int), `float` double (`Float32`
float), `str` string, `bool` boolean, `bytes` bytes, `datetime` long (timestamp-micros),
`date` int (date), `Decimal` bytes (decimal; `Annotated[Decimal, DecimalType(precision,
scale)]`, 38 and 9 if not given), `UUID` string (uuid), `X | None` a union with null,
`list[X]` an array,
`dict[str, X]` a map, an `Enum` of strings an enum, and a nested TypedDict or dataclass a
nested record. A field that may be left out (`NotRequired`, or a dataclass default) needs a
default Avro can hold: null for `X | None`, or the dataclass's scalar default. Anything
else is refused, naming the class and the field.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import types
import typing
import uuid
from typing import Annotated, Any, NamedTuple

__all__ = [
    "DecimalType",
    "Float32",
    "Int32",
    "SchemaDeriver",
    "TypeSchemaError",
    "avro_of",
    "is_record_type",
]


class TypeSchemaError(TypeError):
    """A class whose fields have no Avro form; the message names the class and field."""


class DecimalType(NamedTuple):
    """`Annotated[Decimal, DecimalType(precision, scale)]`: a decimal field's Avro size."""

    precision: int
    scale: int


class _Narrow(NamedTuple):
    avro: str


Int32 = Annotated[int, _Narrow("int")]
"""An `int` field written as Avro's 32-bit int rather than a long."""
Float32 = Annotated[float, _Narrow("float")]
"""A `float` field written as Avro's 32-bit float rather than a double."""

_DEFAULT_DECIMAL = DecimalType(38, 9)
_PRIMITIVE: dict[object, Any] = {
    bool: "boolean",
    int: "long",
    float: "double",
    str: "string",
    bytes: "bytes",
    dt.datetime: {"type": "long", "logicalType": "timestamp-micros"},
    dt.date: {"type": "int", "logicalType": "date"},
    uuid.UUID: {"type": "string", "logicalType": "uuid"},
}
_SCALAR_DEFAULTS = (bool, int, float, str)


def is_record_type(tp: object) -> bool:
    """Whether `tp` is a class a schema can be derived from: a TypedDict or a dataclass."""
    return isinstance(tp, type) and (typing.is_typeddict(tp) or dataclasses.is_dataclass(tp))


def avro_of(tp: type, namespace: str) -> dict[str, Any]:
    """The Avro record schema of `tp`, named `namespace.<class name>`, with every record
    it nests defined inside it."""
    deriver = SchemaDeriver(namespace)
    return deriver.schemas[deriver.record_name(tp)]


class _Field(NamedTuple):
    name: str
    annotation: object
    optional: bool  # may be left out of a record
    default: object  # a dataclass field's default, or _NONE


_NONE = object()


class SchemaDeriver:
    """The schemas of one namespace, derived class by class: a record type another one
    already defined is referred to by its name, so each is defined once (as files of a
    schema directory would be)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.defined: dict[str, object] = {}
        # each top-level record derived, by full name, in the order derived
        self.schemas: dict[str, dict[str, Any]] = {}

    def record_name(self, tp: object) -> str:
        """Derive `tp`'s schema here (unless derived already) and give its full name."""
        if not is_record_type(tp):
            raise TypeSchemaError(f"{_qualname(tp)} is neither a TypedDict nor a dataclass")
        assert isinstance(tp, type)
        schema = self.type_of(tp, tp, "")
        fullname = f"{self.namespace}.{tp.__name__}"
        if isinstance(schema, dict):
            self.schemas[fullname] = schema
        return fullname

    def _record(self, tp: type) -> dict[str, Any] | str:
        fullname = f"{self.namespace}.{tp.__name__}"
        seen = self.defined.get(fullname)
        if seen is tp:
            return fullname
        if seen is not None:
            raise TypeSchemaError(
                f"{_qualname(tp)} and {_qualname(seen)} would both be {fullname!r}"
            )
        self.defined[fullname] = tp
        fields = []
        for f in _fields(tp):
            avro = self.type_of(f.annotation, tp, f.name)
            field: dict[str, Any] = {"name": f.name, "type": avro}
            if f.default is not _NONE:
                field["default"] = _default(tp, f, avro)
            elif f.optional:
                if not _nullable(avro):
                    raise TypeSchemaError(
                        f"{_qualname(tp)}.{f.name}: a field that may be left out needs a "
                        "default; make it `X | None` (default null)"
                    )
                field["default"] = None
            elif _nullable(avro) and typing.is_typeddict(tp):
                field["default"] = None
            fields.append(field)
        out: dict[str, Any] = {"type": "record", "name": tp.__name__,
                               "namespace": self.namespace, "fields": fields}  # fmt: skip
        doc = (tp.__doc__ or "").strip()
        if doc and not doc.startswith(f"{tp.__name__}("):  # a dataclass's generated doc
            out["doc"] = " ".join(doc.split())
        return out

    def type_of(self, ann: object, owner: type, field: str) -> Any:
        where = f"{_qualname(owner)}.{field}" if field else _qualname(owner)
        origin = typing.get_origin(ann)
        if origin is typing.Annotated:
            base, *extra = typing.get_args(ann)
            if base is decimal.Decimal:
                spec = next((e for e in extra if isinstance(e, DecimalType)), _DEFAULT_DECIMAL)
                return _decimal(spec)
            narrow = next((e for e in extra if isinstance(e, _Narrow)), None)
            if narrow is not None:
                return narrow.avro
            return self.type_of(base, owner, field)
        if ann is decimal.Decimal:
            return _decimal(_DEFAULT_DECIMAL)
        if ann in _PRIMITIVE:
            return _PRIMITIVE[ann]
        if origin in (typing.Union, types.UnionType):
            args = typing.get_args(ann)
            rest = [a for a in args if a is not type(None)]
            if len(rest) == 1 and len(args) == 2:
                return ["null", self.type_of(rest[0], owner, field)]
            raise TypeSchemaError(f"{where}: {ann!r}; a union may only be `X | None`")
        if origin is list:
            (item,) = typing.get_args(ann) or (None,)
            if item is None:
                raise TypeSchemaError(f"{where}: a list needs its item type, e.g. list[int]")
            return {"type": "array", "items": self.type_of(item, owner, field)}
        if origin is dict:
            key, value = typing.get_args(ann) or (None, None)
            if key is not str:
                raise TypeSchemaError(
                    f"{where}: {ann!r}; a map's keys are str, e.g. dict[str, int]"
                )
            return {"type": "map", "values": self.type_of(value, owner, field)}
        if isinstance(ann, type) and issubclass(ann, enum.Enum):
            symbols = [m.value for m in ann]
            if not all(isinstance(s, str) and s.isidentifier() for s in symbols):
                raise TypeSchemaError(f"{where}: enum {ann.__name__}'s values must be names")
            return {"type": "enum", "name": ann.__name__, "namespace": self.namespace,
                    "symbols": symbols}  # fmt: skip
        if is_record_type(ann):
            assert isinstance(ann, type)
            return self._record(ann)
        raise TypeSchemaError(f"{where}: {ann!r} has no Avro form ({_KNOWN})")


_KNOWN = ("int, float, str, bool, bytes, datetime, date, Decimal, UUID, X | None, "
          "list[X], dict[str, X], an Enum, a TypedDict or a dataclass")  # fmt: skip


def _fields(tp: type) -> list[_Field]:
    try:
        hints = typing.get_type_hints(tp, include_extras=True)
    except NameError as e:
        raise TypeSchemaError(f"{_qualname(tp)}: an annotation names {e.name!r}, which is "
                              "not defined where the class is") from None  # fmt: skip
    if typing.is_typeddict(tp):
        optional: frozenset[str] = getattr(tp, "__optional_keys__", frozenset())
        out = []
        for name, ann in hints.items():
            inner, left_out = ann, name in optional
            # read from the hint too: under `from __future__ import annotations` Python 3.11
            # cannot see NotRequired when it makes the class, so its optional keys miss it
            while typing.get_origin(inner) in (typing.NotRequired, typing.Required):
                left_out = typing.get_origin(inner) is typing.NotRequired
                (inner,) = typing.get_args(inner)
            out.append(_Field(name, inner, left_out, _NONE))
        return out
    out = []
    for f in dataclasses.fields(tp):
        default: object = _NONE
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out.append(_Field(f.name, hints[f.name], default is not _NONE, default))
    return out


def _default(owner: type, f: _Field, avro: Any) -> Any:
    value = f.default
    if value is None:
        if not _nullable(avro):
            raise TypeSchemaError(f"{_qualname(owner)}.{f.name}: default None needs `X | None`")
        return None
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, _SCALAR_DEFAULTS) or value in ([], {}):
        if _nullable(avro):
            raise TypeSchemaError(
                f"{_qualname(owner)}.{f.name}: Avro gives an `X | None` field no default but None"
            )
        return value
    raise TypeSchemaError(f"{_qualname(owner)}.{f.name}: default {value!r} has no Avro form")


def _nullable(avro: Any) -> bool:
    return isinstance(avro, list) and avro[:1] == ["null"]


def _decimal(spec: DecimalType) -> dict[str, Any]:
    return {"type": "bytes", "logicalType": "decimal", "precision": spec.precision,
            "scale": spec.scale}  # fmt: skip


def _qualname(tp: object) -> str:
    return f"{getattr(tp, '__module__', '?')}.{getattr(tp, '__qualname__', repr(tp))}"
