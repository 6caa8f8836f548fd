"""A tiny scripted HTTP/1.1 server that plays a model API for the real SDKs.

Each test queues the answers (status, JSON body, headers); the server hands
them out in order, one per request, and records every request it saw
(method, path, headers, decoded JSON body). It speaks just enough HTTP for
httpx (keep-alive, Content-Length bodies), on the test's own event loop.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Answer:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class ModelApi:
    """Start with ``await api.start()``; ``api.url`` is its base URL."""

    def __init__(self) -> None:
        self.answers: list[Answer] = []
        self.seen: list[Seen] = []
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answer(self, status: int, body: Any, **headers: str) -> None:
        self.answers.append(
            Answer(status, body, {k.replace("_", "-"): v for k, v in headers.items()})
        )

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            await self._server.wait_closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, path, _ = line.decode().split(" ", 2)
                headers: dict[str, str] = {}
                while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    k, _, v = h.decode().partition(":")
                    headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.seen.append(Seen(method, path, headers, json.loads(body) if body else None))
                answer = (
                    self.answers.pop(0)
                    if self.answers
                    else Answer(500, {"error": "no answer queued"})
                )
                payload = json.dumps(answer.body).encode()
                head = [
                    f"HTTP/1.1 {answer.status} X",
                    "content-type: application/json",
                    f"content-length: {len(payload)}",
                    *(f"{k}: {v}" for k, v in answer.headers.items()),
                ]
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()
