from __future__ import annotations

from typing import Any

import pytest

from marketplace.config import Settings
from tests.api.probe import probe
from tests.conftest import Servers, make_settings
from tests.support.apps import app_client


@pytest.fixture
def probe_settings(servers: Servers) -> Settings:
    return make_settings(
        servers,
        rate_limits={"probeLimited": "3/60"},
        max_body_bytes=2048,
    )


@pytest.fixture
async def probe_client(
    aiohttp_client: Any, probe_settings: Settings, ray_cluster: None, clean_state: None
) -> Any:
    return await app_client(aiohttp_client, probe_settings, [probe])
