"""The Redis backend: the original PinLater layout, one Lua script per operation.

``RedisDriver`` parses the original JSON shard config and opens a ``RedisStore`` per shard;
``durability_warnings`` reads a shard's own settings and says what could lose jobs.
"""

from pinlater.backends.redis.config import RedisDriver, RedisEndpoint, RedisShardConfig, parse_redis_config
from pinlater.backends.redis.durability import durability_warnings
from pinlater.backends.redis.store import RedisStore

__all__ = [
    "RedisDriver",
    "RedisEndpoint",
    "RedisShardConfig",
    "RedisStore",
    "durability_warnings",
    "parse_redis_config",
]
