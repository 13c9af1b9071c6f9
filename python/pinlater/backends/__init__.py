"""Storage backends: one per-shard seam (``base.ShardStore``), shared logic in ``sharded``."""
