"""What a model client is built from, as one frozen value: :func:`dsh.llm.deepseek.open_client` takes it.

Its fields are :class:`~dsh.llm.deepseek.DeepSeekClient`'s keyword arguments with the same defaults (those that
describe its transport, dsh.llm.transport, are :class:`TransportOptions`). This module imports no HTTP client, so
a session's config can describe its client before the client's modules are loaded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from dsh.llm.defaults import (
    DEFAULT_BASE_URL,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_FIRST_TOKEN_TIMEOUT,
    DEFAULT_STREAM_IDLE_TIMEOUT,
)

__all__ = ["ClientSettings", "TransportOptions"]


@dataclass(frozen=True)
class ClientSettings:
    """The endpoint, key, proxy, deadlines, recording and ring of one client (see ``DeepSeekClient``)."""

    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = field(default=None, repr=False)  # never in a repr: it may reach a log
    stream_idle_timeout: float = DEFAULT_STREAM_IDLE_TIMEOUT
    first_token_timeout: float = DEFAULT_FIRST_TOKEN_TIMEOUT
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    proxy: str | None = None
    trust_env: bool = True  # off: the caller already read the proxy variables
    env: Mapping[str, str] | None = field(default=None, repr=False)  # None: the process's environment
    record: str | os.PathLike[str] | None = None  # a --record file
    shown_as: tuple[str, str | None] | None = None  # the endpoint and proxy messages name (a replay's recorded ones)
    ring_bytes: int = 0  # the last exchanges kept for a failure capsule; 0 keeps none
    dialect: str | None = None  # "deepseek" | "openai" (dsh.llm.endpoint.DIALECTS); None: by base_url's host
    max_parallel: int = 0  # chat requests the client has in flight at once; 0: no bound
    request_gate: str | None = None  # a parent dsh's shared request gate to join (a child's: dsh.llm.request_gate)
    keep_images: bool = False  # a request's image bytes stay in --record files and reports (else a hash stands)


class TransportOptions(TypedDict, total=False):
    """The keywords of ``DeepSeekClient(...)`` that describe its transport: the fields of the same names above."""

    base_url: str
    proxy: str | None
    trust_env: bool
    env: Mapping[str, str] | None
    record: str | os.PathLike[str] | None
    shown_as: tuple[str, str | None] | None
    ring_bytes: int
