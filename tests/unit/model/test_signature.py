"""A transaction's declared parameters (`model.signature`): names, required-ness and types,
with NotRequired seen even under `from __future__ import annotations` (this module)."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

import pytest

from txstream import App, DataflowError, TxnContext


class Pay(TypedDict):
    to: int
    amount: float
    memo: NotRequired[str]
    tags: NotRequired[list[str]]
    extra: NotRequired[Any]


def signed_app() -> App:
    app = App("signed")

    @app.transaction(params=Pay)
    def pay(ctx: TxnContext, params: dict[str, Any]) -> None:
        return None

    @app.transaction()
    def free(ctx: TxnContext, params: dict[str, Any]) -> None:
        return None

    return app


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"to": 1, "amount": 2.5}, None),
        ({"to": 1, "amount": 2, "memo": "x", "tags": ["a"], "extra": [{}]}, None),  # int is a float
        ({"amount": 2.5}, "parameter 'to' is missing"),
        ({"to": 1, "amount": 2.5, "from": 3}, "parameter 'from' is not declared; it takes"),
        ({"to": "1", "amount": 2.5}, "parameter 'to': Input should be a valid integer, not '1'"),
        ({"to": True, "amount": 2.5}, "parameter 'to': Input should be a valid integer"),
        ({"to": 1, "amount": 2.5, "tags": ["a", 2]}, "parameter 'tags'[1]: Input should be"),
        ({"to": 1, "amount": 2.5, "memo": None}, "parameter 'memo': Input should be"),
        ([1], "parameters must be a JSON object, not [1]"),
    ],
)
def test_declared_parameters_are_checked(params: object, problem: str | None) -> None:
    found = signed_app().decl.transactions["pay"].problem(params)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem), found


def test_an_undeclared_signature_takes_any_object() -> None:
    free = signed_app().decl.transactions["free"]
    assert free.problem({"anything": "goes"}) is None
    assert free.problem("x") == "parameters must be a JSON object, not 'x'"


def test_params_must_be_a_typed_dict() -> None:
    def f(ctx: TxnContext, params: dict[str, Any]) -> None:
        return None

    with pytest.raises(DataflowError, match="transaction 'f': params must be a TypedDict"):
        App("bad").transaction(params=dict)(f)
