"""The httpx transport a :class:`~dsh.llm.transport.Transport` opens on the first request (httpx's
``_transports/default.py`` is the connection pool it starts from).

Built on httpx: :meth:`Transport.open <dsh.llm.transport.Transport.open>` imports this module only when the first
request is made (see dsh.llm.transport for why).
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from dsh.llm.network import ssl_context
from dsh.llm.replay_transport import replaying_transport
from dsh.llm.wire_recorder import recording_transport
from dsh.llm.wire_trace import TraceWriter

__all__ = ["open_http_transport"]


def open_http_transport(*, proxy: str | None, env: Mapping[str, str], replaying: bool,
                        tap: TraceWriter | None) -> httpx.AsyncBaseTransport:
    """The connection pool through ``proxy`` (trusting what ``env``'s ``SSL_CERT_FILE`` or the system trusts), with
    a replay's marker and the ``tap`` around it (the fields of the same names of a ``Transport``).

    The proxy and the trust store were picked already, so httpx reads neither from the environment itself.
    """
    opened: httpx.AsyncBaseTransport = httpx.AsyncHTTPTransport(verify=ssl_context(env), proxy=proxy,
                                                                 trust_env=False)
    if replaying:
        # A failure recorded before any response is raised again, not met as a reset (docs/record-replay.md).
        opened = replaying_transport(opened)
    if tap is not None:
        opened = recording_transport(opened, tap)  # tees every exchange: a --record file, the capsule's ring
    return opened
