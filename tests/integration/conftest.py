"""The integration tests' shared fixtures: the Cosmos-faithful store's proxy and its clock."""

from collections.abc import Iterator

import pytest

from tests.integration.cosmos_proxy import Clock, proxy_of
from tools.cosmos_store.proxy import CosmosProxy


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cosmos(secantus_uri: str, clock: Clock) -> Iterator[CosmosProxy]:
    with proxy_of(secantus_uri, seed=7, clock=clock) as proxy:
        yield proxy
