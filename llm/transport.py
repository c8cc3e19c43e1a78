"""How a model client's requests reach the endpoint: built in one place and handed to the client.

httpx's own pattern (``httpx/_transports/base.py``): a client sends through the transport it is given and does
not know how the bytes travel. :func:`open_transport` decides that once, from a
:class:`~dsh.llm.client_settings.ClientSettings`: the proxy (the configured one, else the one the environment
names, picked as httpx would pick it: dsh.llm.network), the trust store (``SSL_CERT_FILE`` or the system's), a
replay's marker (dsh.llm.replay_transport), the recorder that tees every exchange into a ``--record`` file and
the capsule's ring (dsh.llm.wire_recorder), and what messages call the endpoint and the proxy (a replay names the
recorded ones, so that its lines are the live run's). See docs/architecture.md and docs/record-replay.md.

httpx itself is loaded by :meth:`Transport.open`, on the first request (dsh.llm.http_transport): its import and the
SSL context cost ~100 ms that the first prompt should not wait for (tests/repl/test_first_prompt_imports.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dsh.llm.client_settings import ClientSettings
from dsh.llm.endpoint import default_dialect
from dsh.llm.exchange_ring import ExchangeRing
from dsh.llm.network import environment_proxy
from dsh.llm.redact import redact_url, url_secrets
from dsh.llm.wire_trace import TraceWriter

if TYPE_CHECKING:
    import httpx

__all__ = ["Transport", "open_transport"]


@dataclass(frozen=True, slots=True)
class Transport:
    """Where a client's requests go and through what, and how its messages name both."""

    base_url: str  # without a trailing slash
    proxy: str | None  # the proxy that carries every request; None: a direct connection
    env: Mapping[str, str]  # where SSL_CERT_FILE is read (and what a certificate probe reads)
    base_url_display: str  # the endpoint as messages name it: credentials masked, or a replay's recorded one
    proxy_display: str | None
    replaying: bool = False  # a replay: a recorded failure is raised again, never probed
    tap: TraceWriter | None = None  # tees every exchange: a --record file, the capsule's ring

    @property
    def ring(self) -> ExchangeRing | None:
        """The last exchanges, kept raw and masked when a failure capsule reads them (docs/reporting.md); None keeps
        none."""
        return self.tap.ring if self.tap is not None else None

    @property
    def url_secrets(self) -> tuple[str, ...]:
        """The credentials in the endpoint's and the proxy's URLs: masked wherever they could show."""
        return url_secrets(self.base_url) + (url_secrets(self.proxy) if self.proxy else ())

    def open(self) -> httpx.AsyncBaseTransport:
        """The httpx transport for the first request: the connection pool, with the replay and the tap around it."""
        from dsh.llm.http_transport import open_http_transport  # httpx: the first request (module docstring)

        return open_http_transport(proxy=self.proxy, env=self.env, replaying=self.replaying, tap=self.tap)

    def close(self) -> None:
        if self.tap is not None:
            self.tap.close()


def open_transport(settings: ClientSettings) -> Transport:
    """The transport ``settings`` describe; a ``record`` file is opened here (``TraceFileError`` if it cannot be)."""
    base_url = settings.base_url.rstrip("/")
    env = dict(os.environ if settings.env is None else settings.env)
    proxy = settings.proxy
    if proxy is None and settings.trust_env:
        found = environment_proxy(base_url, env)
        proxy = found[0] if found else None
    if settings.shown_as is not None:
        base_url_display, proxy_display = settings.shown_as
    else:
        base_url_display, proxy_display = redact_url(base_url), redact_url(proxy) if proxy else None
    replaying = settings.shown_as is not None
    transport = Transport(base_url, proxy, env, base_url_display, proxy_display, replaying=replaying)
    ring = ExchangeRing(settings.ring_bytes) if settings.ring_bytes > 0 else None
    if settings.record is None and ring is None:
        return transport
    timeouts = {"stream_idle_timeout": settings.stream_idle_timeout,
                "first_token_timeout": settings.first_token_timeout}
    secrets = ((settings.api_key,) if settings.api_key else ()) + transport.url_secrets
    tap = TraceWriter(settings.record, secrets=secrets, base_url=base_url_display, proxy=proxy_display,
                      timeouts=timeouts, ring=ring, dialect=settings.dialect or default_dialect(base_url_display),
                      keep_images=settings.keep_images)
    return replace(transport, tap=tap)
