"""pinlater: a drop-in, Rust-accelerated successor to Pinterest's PinLater job queue."""

from pinlater._pinlater import __version__
from pinlater.errors import ErrorCode, PinLaterError

__all__ = ["ErrorCode", "PinLaterError", "__version__"]
