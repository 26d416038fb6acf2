import gc
from collections.abc import Iterator

import pytest

# test_mrtr_bridge.py moves onto playbooks in another branch of issue #11;
# until then its tests leave the memory streams of their extra clients
# unclosed (`send, _ = anyio.create_memory_object_stream(...)`), which anyio
# reports as a ResourceWarning when they are collected. Ignored for that
# file alone, and collected at each of its tests' end so that no later test
# is blamed for them.
_LEAKS_PENDING_MOVE = frozenset({"tests/test_mrtr_bridge.py"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.split("::")[0] in _LEAKS_PENDING_MOVE:
            item.add_marker(
                pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
            )


@pytest.fixture(autouse=True)
def _collect_pending_leaks(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if request.node.nodeid.split("::")[0] in _LEAKS_PENDING_MOVE:
        gc.collect()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
