"""What makes the sandbox's HTTP server safe to expose: a token, a body limit, connection deadlines.

- `GuardMiddleware` (pure ASGI): with a token, every request needs ``Authorization: Bearer <token>``
  (401 otherwise, compared in constant time); a body above ``max_body_bytes`` is refused with 413,
  whether it announces its length or streams it chunked.
- `DeadlineH11Protocol` (uvicorn's h11 protocol plus a timer): a connection must deliver a complete
  request (headers *and* body) within ``request_timeout_s`` of its first byte or of connecting, or it
  is closed; an idle keep-alive connection is closed by uvicorn's ``timeout_keep_alive``. A client
  that trickles bytes (slowloris) or opens sockets and says nothing cannot hold the server.
- `check_bind`: binding to anything but a loopback address needs a token or an explicit ``insecure``.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
import json
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from envs.sandbox.auth import TOKEN_ENV

log = logging.getLogger(__name__)
DEFAULT_MAX_BODY_BYTES = 16 << 20
"""Largest request body accepted by default (code, stdin and cells together): 16 MiB."""
DEFAULT_REQUEST_TIMEOUT_S = 30.0
"""Seconds a connection has to deliver one whole request by default."""


class GuardMiddleware:
    """Token check and body-size limit around an ASGI app (see the module docstring)."""

    def __init__(self, app: Any, *, token: str | None, max_body_bytes: int) -> None:
        if max_body_bytes < 1:
            raise ValueError(f"max_body_bytes={max_body_bytes} must be >= 1.")
        self.app, self.token, self.max_body_bytes = app, token, max_body_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        """Check the token and the announced length, then read the body (bounded) and pass it on."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if self.token is not None and not _authorized(headers.get(b"authorization", b""), self.token):
            await _reply(send, 401, "missing or wrong API token: send 'Authorization: Bearer <token>'")
            return
        length = headers.get(b"content-length", b"0")
        if not length.isdigit() or int(length) > self.max_body_bytes:
            await _reply(send, 413, f"request body larger than {self.max_body_bytes} bytes")
            return
        body = await _read_body(receive, self.max_body_bytes)
        if body is None:
            await _reply(send, 413, f"request body larger than {self.max_body_bytes} bytes")
            return
        replayed = False

        async def replay() -> dict:   # the whole body once (already bounded), then the real channel
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _read_body(receive: Any, limit: int) -> bytes | None:
    """The request body, read in full; None as soon as it passes ``limit`` bytes (chunked or not)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _authorized(header: bytes, token: str) -> bool:
    expected = f"Bearer {token}".encode()
    return hmac.compare_digest(header, expected)


async def _reply(send: Any, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing connections that do not deliver a whole request in time."""

    request_timeout_s = DEFAULT_REQUEST_TIMEOUT_S

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        """Start the deadline: even a silent connection must send a request in time."""
        super().connection_made(transport)
        self._deadline = self.loop.call_later(self.request_timeout_s, self._expire)

    def data_received(self, data: bytes) -> None:
        """Arm the deadline at a request's first byte; disarm it once the request is complete."""
        if getattr(self, "_deadline", None) is None and self.conn.their_state is h11.IDLE:
            self._deadline = self.loop.call_later(self.request_timeout_s, self._expire)
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE and self.conn.their_state is not h11.SEND_BODY:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        """Cancel the deadline with the connection."""
        self._disarm()
        super().connection_lost(exc)

    def _disarm(self) -> None:
        deadline = getattr(self, "_deadline", None)
        if deadline is not None:
            deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
            log.info("sandbox server: closed a connection that sent no complete request in %.0f s",
                     self.request_timeout_s)
            self.transport.close()


def deadline_protocol(request_timeout_s: float) -> type[DeadlineH11Protocol]:
    """`DeadlineH11Protocol` with another timeout (a subclass, as uvicorn wants a class)."""
    if not request_timeout_s > 0:
        raise ValueError(f"request_timeout_s={request_timeout_s} must be > 0.")
    return _protocol_class(float(request_timeout_s))


@functools.cache
def _protocol_class(timeout: float) -> type[DeadlineH11Protocol]:
    return type("DeadlineH11Protocol", (DeadlineH11Protocol,), {"request_timeout_s": timeout})


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, *, token: str | None, insecure: bool) -> None:
    """Refuse a non-loopback bind without a token, unless ``insecure`` (then warn).

    Raises:
        ValueError: ``host`` is reachable from other machines and neither a token nor ``insecure`` is set.
    """
    if is_loopback(host) or token:
        return
    if not insecure:
        raise ValueError(f"--host {host} exposes the sandbox to other machines: anyone who reaches it runs "
                         f"code here. Set an API token with --token or ${TOKEN_ENV}, or pass --insecure "
                         "(only behind a firewall you trust).")
    log.warning("sandbox server on %s WITHOUT a token (--insecure): anyone who can reach it runs code here.",
                host)
