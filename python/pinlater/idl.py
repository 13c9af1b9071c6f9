"""The Thrift types of the contract, loaded from the IDL the extension embeds.

``thrift/pinlater.thrift`` is compiled into the extension (``THRIFT_IDL``), so the running
server always speaks exactly the contract it was built from; no generated code exists.
"""

from __future__ import annotations

import io
from typing import Any

import thriftpy2

from pinlater._pinlater import THRIFT_IDL

#: The loaded module: ``idl.PinLater`` (the service), ``idl.PinLaterJob``, ``idl.ErrorCode`` ...
idl: Any = thriftpy2.load_fp(io.StringIO(THRIFT_IDL), module_name="pinlater_thrift")
