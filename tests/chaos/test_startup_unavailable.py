"""A worker that boots while Postgres refuses connections waits for it instead of exiting."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from urllib.parse import urlsplit

import pytest

from coordinator.config.settings import CoordinatorSettings
from coordinator.runtime.worker import Worker
from participant_sdk.protocol import reply_topic
from tests.chaos.support.proxy import TcpProxy
from tests.integration.test_store_support import make_registry, migrated
from tests.integration.test_worker_support import create_topics

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(120)]

REFUSED_FOR = 3.0


async def test_worker_start_waits_for_postgres(
    fresh_db: str, kafka_bootstrap: str, topic_prefix: str
) -> None:
    await migrated(fresh_db)
    await create_topics(kafka_bootstrap, {reply_topic(topic_prefix): 1})
    target = urlsplit(fresh_db)
    async with TcpProxy(target.hostname or "127.0.0.1", target.port or 5432) as proxy:
        proxy.refuse(REFUSED_FOR)
        dsn = fresh_db.replace(f":{target.port}/", f":{proxy.port}/")
        settings = CoordinatorSettings(
            dsn=dsn, kafka_bootstrap=kafka_bootstrap, topic_prefix=topic_prefix,
            group_id=f"{topic_prefix}-g", pool_max_size=2, shutdown_grace=timedelta(seconds=5),
        )
        worker = Worker(settings, make_registry(topic_prefix))
        began = time.monotonic()
        await asyncio.wait_for(worker.start(), 60)
        try:
            waited = time.monotonic() - began
            assert waited >= REFUSED_FOR - 0.5, f"started after {waited:.1f}s: not refused?"
            assert await worker.store.pool.fetchval("SELECT count(*) FROM sagas") == 0
        finally:
            await worker.stop()
