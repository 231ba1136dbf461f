"""The body of every refusal the HTTP endpoint gives, console routes included."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ErrorOut(BaseModel):
    error: str


def refusals(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for refusals with an `error` body."""
    why = {
        400: "a bad request, naming what is wrong",
        401: "no valid bearer token, where one is required",
        404: "no such thing, naming what there is",
        503: "a source this answer needs is not there, naming it",
        504: "no answer from the coordinator in time",
    }
    return {code: {"model": ErrorOut, "description": why[code]} for code in codes}
