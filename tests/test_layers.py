"""The package's layers: nothing below ``server/`` imports it.

The monitor, the broker, the backends, the worker and the client are handed what they need from
the server (its counters as a ``pinlater.counters.Counters``); only ``server/`` itself and the
command line (which starts servers) import ``pinlater.server``. Read from the source with ``ast``,
so an import inside a function or under ``TYPE_CHECKING`` counts too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pinlater

PACKAGE = Path(pinlater.__file__).parent
ALLOWED = ("pinlater.server", "pinlater.cli")
SERVER = "pinlater.server"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(name: str, is_package: bool, source: str) -> Iterator[tuple[int, str]]:
    """(line, module) for every import in module ``name``'s source, relative ones resolved,
    ``from m import n`` giving both ``m`` and ``m.n`` (``n`` may be a submodule)."""
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def is_within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def server_imports(name: str, is_package: bool, source: str) -> list[str]:
    """What module ``name`` imports from ``server/`` (nothing when it may)."""
    if any(is_within(name, allowed) for allowed in ALLOWED):
        return []
    return [
        f"{name}:{line} imports {module}"
        for line, module in imported(name, is_package, source)
        if is_within(module, SERVER)
    ]


def test_no_module_below_the_server_imports_it() -> None:
    paths = sorted(PACKAGE.rglob("*.py"))
    assert len(paths) > 50  # the whole package was read
    found = []
    for path in paths:
        found += server_imports(module_name(path), path.name == "__init__.py", path.read_text(encoding="utf-8"))
    assert found == []


def test_the_check_sees_every_kind_of_import() -> None:
    sources = [
        "import pinlater.server.metrics",
        "from pinlater.server.metrics import Metrics",
        "from pinlater import server",
        "from ..server import metrics",
        "def f():\n    from ..server.metrics import Metrics\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pinlater.server import app\n",
    ]
    for source in sources:
        assert server_imports("pinlater.backends.probe", False, source) != [], source
    assert server_imports("pinlater.backends", True, "from ..server import app") != []
    assert server_imports("pinlater.backends.probe", False, "from . import base\nimport pinlater.servers") == []
    assert server_imports("pinlater.cli.serve", False, "from pinlater.server.app import PinLaterServer") == []
    assert module_name(PACKAGE / "backends" / "__init__.py") == "pinlater.backends"
    assert module_name(PACKAGE / "monitor.py") == "pinlater.monitor"


def test_the_server_never_asks_which_backend_it_has() -> None:
    # Every kind is a BackendDriver (backends/drivers.py reads the kind's name, once).
    tree = ast.parse((PACKAGE / "server" / "app.py").read_text(encoding="utf-8"))
    names = {"embedded", "redis", "mysql"}
    found = [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower() in names)
        or (isinstance(node, ast.Attribute) and node.attr == "backend" and ast.unparse(node.value).endswith("settings"))
        or (isinstance(node, ast.Attribute) and node.attr == "backend" and ast.unparse(node.value) == "s")
        or (isinstance(node, ast.Name) and node.id == "isinstance")
    ]
    assert found == []
