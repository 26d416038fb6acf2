"""The gateway service in-process over its own upstream: the real command or
URL its config names (no scripted `connect`, unlike tests/scripted.py's
`gateway`), one client link over a memory stream, no front. What
tests/http_back_support.py, tests/test_upstream_start.py,
tests/test_upstream_errors.py, tests/test_hostile_upstream.py and
tests/test_real_peers_mrtr_expiry.py each built for themselves."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio

from gateway import wire
from gateway.client_link import ClientLink
from gateway.config import Config
from gateway.runtime.service import GatewayService
from tests.scripted import Client


@asynccontextmanager
async def in_process_service(cfg: Config) -> AsyncIterator[Client]:
    """The service on `cfg`, started, and its one client (`upstream` is None:
    there is no scripted one). The client's requests run in a task group of
    their own. On every way out the service is closed (shielded, so that a
    test that fails still stops the upstream process it started), then the
    client's streams."""
    async with anyio.create_task_group() as tg:
        service = GatewayService(cfg)
        send, receive = anyio.create_memory_object_stream[wire.Message](math.inf)
        link = ClientLink.over_stream(send, transport="test")
        service.links.add(link)
        with send, receive:
            await service.start(tg)
            try:
                async with anyio.create_task_group() as requests:
                    client = Client(service, link, receive, requests, cast(Any, None))
                    try:
                        yield client
                    finally:
                        client.close_streams()
                    requests.cancel_scope.cancel()
            finally:
                with anyio.CancelScope(shield=True):
                    await service.aclose()
        tg.cancel_scope.cancel()
