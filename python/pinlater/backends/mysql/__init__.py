"""The MySQL backend: the original PinLater schema on MySQL/MariaDB through PyMySQL.

``MySQLDriver`` parses the original JSON config and opens one ``MySQLStore`` per shard.
"""

from pinlater.backends.mysql.config import Endpoint, MySQLDriver, MySQLShardConfig, parse_mysql_config
from pinlater.backends.mysql.store import MySQLStore

__all__ = ["Endpoint", "MySQLDriver", "MySQLShardConfig", "MySQLStore", "parse_mysql_config"]
