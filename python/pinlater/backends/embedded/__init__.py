"""The embedded backend: each shard is a local SQLite file; no server to run.

``EmbeddedStore`` implements ``ShardStore`` for one shard; ``EmbeddedDriver`` is the backend
driver that opens the shards a server's settings ask for (``open_embedded_shards`` opens them
outside a server); ``DataDirLock`` keeps a second server off the same files.
"""

from pinlater.backends.embedded.driver import EmbeddedDriver, EmbeddedShardConfig
from pinlater.backends.embedded.lock import DataDirLock
from pinlater.backends.embedded.store import CUSTOM_STATUS_LIMIT, EmbeddedStore, open_embedded_shards, shard_path

__all__ = [
    "CUSTOM_STATUS_LIMIT",
    "DataDirLock",
    "EmbeddedDriver",
    "EmbeddedShardConfig",
    "EmbeddedStore",
    "open_embedded_shards",
    "shard_path",
]
