"""Schemas from Python types: a TypedDict or a dataclass gives the Avro record its `.avsc`
would, the same wire bytes, and every field without an Avro form is refused by name."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import io
import json
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, NotRequired, TypedDict

import fastavro
import pytest

from txstream.schemas.from_types import DecimalType, SchemaDeriver, TypeSchemaError, avro_of

ROOT = Path(__file__).resolve().parents[3]


class Vote(TypedDict):
    vote_id: int
    phone_number: int
    contestant_number: int


def bytes_of(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def test_a_typeddict_is_the_avsc_it_replaces_field_for_field_and_byte_for_byte() -> None:
    avsc = json.loads((ROOT / "schemas/leaderboard/Vote.avsc").read_text())
    derived = avro_of(Vote, "leaderboard")
    assert derived["name"] == avsc["name"] and derived["namespace"] == avsc["namespace"]
    assert derived["fields"] == avsc["fields"]
    row = {"vote_id": 7, "phone_number": 5_551_234_567, "contestant_number": 3}
    assert bytes_of(derived, row) == bytes_of(avsc, row)


class Colour(enum.Enum):
    RED = "RED"
    BLUE = "BLUE"


class Address(TypedDict):
    city: str


class Order(TypedDict):
    """An order as it arrives."""

    id: int
    price: Annotated[Decimal, DecimalType(10, 2)]
    at: dt.datetime
    day: dt.date
    ref: uuid.UUID
    note: str | None
    tags: list[str]
    counts: dict[str, int]
    colour: Colour
    ship_to: Address
    bill_to: NotRequired[Address | None]


def test_every_supported_annotation_maps_and_round_trips() -> None:
    schema = avro_of(Order, "shop")
    types = {f["name"]: f["type"] for f in schema["fields"]}
    assert schema["doc"] == "An order as it arrives."
    assert types["id"] == "long"
    assert types["price"] == {"type": "bytes", "logicalType": "decimal", "precision": 10,
                              "scale": 2}  # fmt: skip
    assert types["at"] == {"type": "long", "logicalType": "timestamp-micros"}
    assert types["day"] == {"type": "int", "logicalType": "date"}
    assert types["note"] == ["null", "string"]
    assert types["tags"] == {"type": "array", "items": "string"}
    assert types["counts"] == {"type": "map", "values": "long"}
    assert types["colour"]["symbols"] == ["RED", "BLUE"]
    assert types["ship_to"]["name"] == "Address"
    assert types["bill_to"] == ["null", "shop.Address"], "a record is defined once"
    defaults = {f["name"]: f.get("default", "absent") for f in schema["fields"]}
    assert defaults["bill_to"] is None and defaults["id"] == "absent"
    row = {"id": 1, "price": Decimal("12.34"), "at": dt.datetime(2026, 12, 7, tzinfo=dt.UTC),
           "day": dt.date(2026, 12, 7), "ref": uuid.uuid4(), "note": None, "tags": ["a"],
           "counts": {"x": 2}, "colour": "BLUE", "ship_to": {"city": "Oslo"}}  # fmt: skip
    parsed = fastavro.parse_schema(schema)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, row)
    back: Any = fastavro.schemaless_reader(io.BytesIO(out.getvalue()), parsed)
    assert back["price"] == Decimal("12.34") and back["bill_to"] is None
    assert back["ship_to"] == {"city": "Oslo"} and back["at"] == row["at"]


@dataclasses.dataclass
class Reading:
    sensor: str
    value: float = 0.0
    unit: str | None = None


def test_a_dataclass_gives_its_defaults() -> None:
    fields = {f["name"]: f for f in avro_of(Reading, "iot")["fields"]}
    assert "default" not in fields["sensor"]
    assert fields["value"]["default"] == 0.0
    assert fields["unit"]["default"] is None
    assert "doc" not in avro_of(Reading, "iot"), "a dataclass's generated doc is no doc"


class Tuple(TypedDict):
    pair: tuple[int, int]


class Loose(TypedDict):
    maybe: NotRequired[int]


class Mixed(TypedDict):
    either: int | str


class Keyed(TypedDict):
    by: dict[int, str]


@pytest.mark.parametrize(
    ("tp", "message"),
    [
        (Tuple, "Tuple.pair: tuple[int, int] has no Avro form"),
        (Loose, "Loose.maybe: a field that may be left out needs a default"),
        (Mixed, "Mixed.either: int | str; a union may only be `X | None`"),
        (Keyed, "Keyed.by: dict[int, str]; a map's keys are str"),
        (int, "builtins.int is neither a TypedDict nor a dataclass"),
    ],
)
def test_a_field_without_an_avro_form_is_refused_by_name(tp: type, message: str) -> None:
    with pytest.raises(TypeSchemaError, match=message.replace("[", r"\[").replace("|", r"\|")):
        avro_of(tp, "x")


InnerA = TypedDict("Inner", {"a": int})  # type: ignore[name-match]  # noqa: UP013
InnerB = TypedDict("Inner", {"b": int})  # type: ignore[name-match]  # noqa: UP013


class Outer(TypedDict):
    one: InnerA
    two: InnerB


def test_two_classes_of_one_name_are_refused() -> None:
    with pytest.raises(TypeSchemaError, match=r"would both be 'x\.Inner'"):
        avro_of(Outer, "x")


def test_schemas_derived_one_after_another_define_a_shared_record_once() -> None:
    class_a, class_b = Order, Address
    deriver = SchemaDeriver("shop")
    assert deriver.record_name(class_b) == "shop.Address"
    assert deriver.record_name(class_a) == "shop.Order"
    order = deriver.schemas["shop.Order"]
    assert {f["name"]: f["type"] for f in order["fields"]}["ship_to"] == "shop.Address"
    assert list(deriver.schemas) == ["shop.Address", "shop.Order"]
    assert deriver.record_name(class_a) == "shop.Order", "the same class again is no change"
