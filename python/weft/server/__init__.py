"""The WebSocket protocol server: every event of a run, to every client, in order.

The pieces, each with one job:

* :mod:`~weft.server.protocol`: the wire shapes (commands, connection
  messages, error codes) and their encoding;
* :mod:`~weft.server.session`: one connection's rules, without I/O;
* :mod:`~weft.server.fanout`: live events, framed once, to every live client,
  with a bounded send queue per client;
* :mod:`~weft.server.history`: replay pages read from the journal;
* :mod:`~weft.server.snapshot`: the run's one fold (:class:`weft.progress.RunProgress`),
  kept by the server and sent as ``progress.snapshot`` to the clients that ask;
* :mod:`~weft.server.auth`: the execution's two tokens (read, read-write) and
  the loopback rule of the anonymous-read opt-in;
* :mod:`~weft.server.server`: the adapter on the websockets library;
* :mod:`~weft.server.schema`: the JSON Schema of every event.

See ``docs/protocol.md`` for the protocol itself.
"""

from weft.server.auth import client_token, ensure_token, ensure_tokens, read_token
from weft.server.history import HistorySource, JournalHistory
from weft.server.server import (
    ProtocolServer,
    RollbackHandler,
    RuntimeCommands,
    ServerConfig,
    ServerError,
    ServerInfo,
    start_server,
)

__all__ = [
    "HistorySource",
    "JournalHistory",
    "ProtocolServer",
    "RollbackHandler",
    "RuntimeCommands",
    "ServerConfig",
    "ServerError",
    "ServerInfo",
    "client_token",
    "ensure_token",
    "ensure_tokens",
    "read_token",
    "start_server",
]
