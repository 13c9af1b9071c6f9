"""The Thrift server: framed transport (``transport.py``), message dispatch (``dispatch.py``),
the PinLater handler (``handler.py``) and the wiring (``app.py``)."""

from pinlater.server.dispatch import Dispatcher, ProtocolError
from pinlater.server.transport import FramedServer, ServerStats

__all__ = ["Dispatcher", "FramedServer", "ProtocolError", "ServerStats"]
