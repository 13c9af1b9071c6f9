from tests.support.library_fixtures import address, pl, queue, srv

__all__ = ["address", "pl", "queue", "srv"]
