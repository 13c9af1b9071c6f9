"""An independent client: Apache Thrift's compiler and library, never the server's own code.

``thrift --gen py`` runs once per test session on ``thrift/pinlater.thrift``. Its output package is
``pinlater_thrift`` (the IDL's namespace), but thriftpy2 already registers the server's module under
that name in ``sys.modules``, so the generated package is imported as ``apache_pinlater_thrift``.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

IDL = Path(__file__).resolve().parents[2] / "thrift" / "pinlater.thrift"
#: The IDL's ``namespace py``: the directory the compiler writes.
GENERATED_NAMESPACE = "pinlater_thrift"
#: The name the generated package is imported under.
IMPORT_NAME = "apache_pinlater_thrift"

_generated: tuple[ModuleType, ModuleType] | None = None


def generated_thrift_modules(tmpdir: Path | str) -> tuple[ModuleType, ModuleType]:
    """Compile the IDL into ``tmpdir`` (once per session) and return (PinLater module, ttypes module).

    Fails the test with a clear message when Apache Thrift's compiler is not installed.
    """
    global _generated
    if _generated is not None:
        return _generated
    compiler = shutil.which("thrift")
    if compiler is None:
        pytest.fail(
            "the Apache Thrift compiler `thrift` is not on PATH; install the Debian package "
            "thrift-compiler (apt-get install thrift-compiler)",
            pytrace=False,
        )
    out = Path(tmpdir)
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [compiler, "--gen", "py", "-out", str(out), str(IDL)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"thrift --gen py failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}", pytrace=False)
    package_dir = out / GENERATED_NAMESPACE
    spec = importlib.util.spec_from_file_location(
        IMPORT_NAME, package_dir / "__init__.py", submodule_search_locations=[str(package_dir)]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[IMPORT_NAME] = package
    spec.loader.exec_module(package)
    service = importlib.import_module(f"{IMPORT_NAME}.PinLater")
    ttypes = importlib.import_module(f"{IMPORT_NAME}.ttypes")
    _generated = (service, ttypes)
    return _generated


def _modules() -> tuple[ModuleType, ModuleType]:
    if _generated is not None:
        return _generated
    tmpdir = tempfile.mkdtemp(prefix="pinlater-thrift-gen-")
    atexit.register(shutil.rmtree, tmpdir, True)
    return generated_thrift_modules(tmpdir)


def connect(host: str, port: int, timeout: float = 10) -> tuple[Any, Any]:
    """Open (generated ``PinLater.Client``, its transport): TSocket + TFramedTransport + TBinaryProtocol.

    Close the transport when done. ``timeout`` (seconds) bounds connecting and each read.
    """
    from thrift.protocol import TBinaryProtocol
    from thrift.transport import TSocket, TTransport

    service, _ = _modules()
    sock = TSocket.TSocket(host, port)
    sock.setTimeout(timeout * 1000)
    transport = TTransport.TFramedTransport(sock)
    client = service.Client(TBinaryProtocol.TBinaryProtocol(transport))
    transport.open()
    return client, transport
