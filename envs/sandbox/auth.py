"""The sandbox server's API token, shared by the server (`http_guard`) and its client (`FusionSandbox`)."""

from __future__ import annotations

import os
import re

TOKEN_ENV = "STARE_SANDBOX_TOKEN"
"""Environment variable holding the API token: `stare sandbox serve` and `FusionSandbox` read it when
no token is given."""

_TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")
"""Printable ASCII without spaces: what an HTTP header value can carry unchanged."""


def resolve_token(token: str | None) -> str | None:
    """`token`, else ``$STARE_SANDBOX_TOKEN``, else None (no token is sent); "" counts as unset.

    Raises:
        ValueError: the token has spaces, control or non-ASCII characters (it cannot travel in a header).
    """
    value = token or os.environ.get(TOKEN_ENV) or None
    if value is not None and not _TOKEN_CHARS.fullmatch(value):
        source = "token" if token else f"${TOKEN_ENV}"
        raise ValueError(f"{source} must be printable ASCII without spaces (it is sent as "
                         "'Authorization: Bearer <token>'); use the token `stare sandbox serve` was given.")
    return value


def auth_headers(token: str | None) -> dict[str, str]:
    """The request headers that carry `token` (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}
