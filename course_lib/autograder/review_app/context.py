"""What every request of the review app shares: its gradebook (``gradebook()``)."""

from __future__ import annotations

from flask import current_app, g

from ..gradebook import Gradebook

__all__ = ["gradebook", "close_gradebook"]


def gradebook() -> Gradebook:
    """The gradebook of this request (opened on first use, closed when the request ends)."""
    if "gradebook" not in g:
        g.gradebook = Gradebook(current_app.config["STORE_DB"])
    return g.gradebook


def close_gradebook(exc: BaseException | None) -> None:
    """Close the request's gradebook, if it opened one (the app's teardown)."""
    book = g.pop("gradebook", None)
    if book is not None:
        book.close()
