from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.library_fixtures import address, pl, queue, srv
from tests.support.pinlater_server import ServerProcess

__all__ = ["address", "pl", "queue", "quick_claims", "srv"]


@pytest.fixture(scope="module")
def quick_claims(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose claims time out after 2 s, checked every 0.1 s."""
    tmp = tmp_path_factory.mktemp("quick-claims")
    props = tmp / "pinlater.properties"
    props.write_text("BACKEND_MONITOR_THREAD_DELAY_SECONDS=0.1\nBACKEND_MONITOR_JOB_CLAIMED_TIMEOUT_SECONDS=2\n")
    server = ServerProcess(Path(tmp / "data"), properties=props).start()
    try:
        yield server
    finally:
        server.stop()
