"""A real MariaDB server for tests: a temporary datadir, a free loopback port, stopped by PID.

    with MariaDBServer(tmp_path / "mariadb") as server:
        conn = server.admin_connection()         # root, autocommit
        server.shard_entry()                     # the original JSON config entry for this server
        server.kill()                            # SIGKILL, as a crash
        server.restart()                         # same datadir, same port

    MariaDBServer(path, tls=True)                # offers TLS (a throwaway self-signed certificate)
    MariaDBServer(path, tls=True, require_secure_transport=True)   # refuses clients without TLS

Start-up is fast (well under a second once a template exists): ``mariadb-install-db`` runs once
per machine into a cached template datadir that servers copy (``PINLATER_MARIADB_TEMPLATE_DIR``,
default under the temp directory), InnoDB runs with a small buffer pool and log, and readiness is
a connection attempt polled with ``wait_for`` (no sleeps). The
server gets a password-protected user (``user``/``password``) with every privilege on the queue
databases (``plq\\_%``) only: no grant-table shortcuts. A missing binary fails with a message
naming the Debian package ``mariadb-server``.

``shared_server()`` is one server per test process, started on first use and stopped at exit,
for suites that only need empty databases (``drop_queue_databases`` between tests); it skips
fsync, so it is not for durability tests.

With ``tls=True`` the server offers TLS with a certificate made for it in its directory by the
``openssl`` command (a CA and a server certificate, valid for a day); ``require_secure_transport``
makes it refuse TCP clients without TLS. Root's connections then go through the Unix socket,
which the server counts as secure, so set-up costs no TLS handshake.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

import pymysql

from tests.support.wait import wait_for

_SEARCH_DIRS = ("/usr/sbin", "/usr/bin", "/usr/libexec", "/usr/local/sbin", "/usr/local/bin")


class MariaDBMissingError(RuntimeError):
    """The MariaDB server binaries are not installed."""


def find_binary(name: str) -> str:
    """``mariadbd`` or ``mariadb-install-db``, or ``MariaDBMissingError`` saying how to install it."""
    found = shutil.which(name)
    if found:
        return found
    for directory in _SEARCH_DIRS:
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK):
            return candidate
    raise MariaDBMissingError(
        f"{name} not found (looked on PATH and in {', '.join(_SEARCH_DIRS)}): install the Debian package "
        "mariadb-server (apt-get install mariadb-server) to run the tests marked mysql"
    )


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Options shared by install-db and the server, so the datadir never needs converting.
_INNODB_OPTIONS = (
    "--innodb-buffer-pool-size=32M",
    "--innodb-log-file-size=32M",
    "--innodb-buffer-pool-load-at-startup=0",
    "--innodb-buffer-pool-dump-at-shutdown=0",
)

#: Where initialised datadirs are kept between test runs (default: under the temp directory).
TEMPLATE_DIR_ENV = "PINLATER_MARIADB_TEMPLATE_DIR"

_template_lock = threading.Lock()
_template_dir: Path | None = None


def _template_datadir() -> Path:
    """An initialised datadir that servers copy (``mariadb-install-db`` takes a second or more).

    Kept between runs under a key of the binaries and options, so only the first run on a
    machine pays for it; built in a scratch directory and renamed into place, so a run that
    dies half-way leaves nothing behind that a later run could pick up.
    """
    global _template_dir
    with _template_lock:
        if _template_dir is not None and (_template_dir / "mysql").is_dir():
            return _template_dir
        install_db = find_binary("mariadb-install-db")
        server = os.stat(find_binary("mariadbd"))
        key_source = repr((server.st_size, server.st_mtime_ns, _INNODB_OPTIONS, os.geteuid()))
        key = hashlib.sha256(key_source.encode()).hexdigest()[:16]
        root = Path(os.environ.get(TEMPLATE_DIR_ENV) or Path(tempfile.gettempdir()) / "pinlater-mariadb-templates")
        root.mkdir(parents=True, exist_ok=True)
        cached = root / key
        if not (cached / "mysql").is_dir():
            scratch = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=root))
            cmd = [
                install_db,
                "--no-defaults",
                f"--datadir={scratch / 'data'}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
                *_INNODB_OPTIONS,
            ]
            if os.geteuid() == 0:
                cmd.append("--user=root")
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
            if done.returncode != 0:
                shutil.rmtree(scratch, ignore_errors=True)
                raise RuntimeError(f"mariadb-install-db failed ({done.returncode}):\n{done.stdout[-4000:]}")
            try:
                os.rename(scratch / "data", cached)
            except OSError:  # another process got there first; theirs is as good
                pass
            shutil.rmtree(scratch, ignore_errors=True)
        _template_dir = cached
        return cached


class MariaDBServer:
    """One ``mariadbd`` on 127.0.0.1 with its own datadir, socket and pid file."""

    host = "127.0.0.1"

    def __init__(
        self,
        directory: Path,
        *,
        flush_log_at_trx_commit: int = 1,
        user: str = "pinlater",
        password: str = "pinlater-test-pw",
        extra_args: tuple[str, ...] = (),
        start_timeout: float = 60.0,
        tls: bool = False,
        require_secure_transport: bool = False,
        start: bool = True,
    ) -> None:
        self.binary = find_binary("mariadbd")
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.datadir = directory / "data"
        self.socket_path = directory / "mariadb.sock"
        self.pid_file = directory / "mariadb.pid"
        self.log_file = directory / "mariadb.err"
        self.flush_log_at_trx_commit = flush_log_at_trx_commit
        self.user = user
        self.password = password
        self.extra_args = extra_args
        self.start_timeout = start_timeout
        if require_secure_transport and not tls:
            raise ValueError("require_secure_transport needs tls=True")
        self.tls_dir: Path | None = make_tls_files(directory / "tls") if tls else None
        self.require_secure_transport = require_secure_transport
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        self._user_created = False
        if start:
            self.start()

    # -- process control --------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        cmd = [
            self.binary,
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--port={self.port}",
            f"--bind-address={self.host}",
            f"--socket={self.socket_path}",
            f"--pid-file={self.pid_file}",
            f"--log-error={self.log_file}",
            "--skip-name-resolve",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci",
            f"--innodb-flush-log-at-trx-commit={self.flush_log_at_trx_commit}",
            "--max-connections=500",
            *_INNODB_OPTIONS,
        ]
        if os.geteuid() == 0:
            cmd.append("--user=root")
        if self.tls_dir is not None:
            cmd += [
                f"--ssl-ca={self.tls_dir / 'ca.pem'}",
                f"--ssl-cert={self.tls_dir / 'server.pem'}",
                f"--ssl-key={self.tls_dir / 'server-key.pem'}",
            ]
        if self.require_secure_transport:
            cmd.append("--require-secure-transport=ON")
        return cmd + list(self.extra_args)

    def start(self) -> MariaDBServer:
        if self.running:
            return self
        if not self.datadir.exists():
            shutil.copytree(_template_datadir(), self.datadir)
        self._proc = subprocess.Popen(
            self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

        def ready() -> bool:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"mariadbd exited with {self._proc.returncode}:\n{self.log_tail()}")
            self._root_connection(connect_timeout=1).close()
            return True

        try:
            wait_for(ready, self.start_timeout, what=f"mariadbd to accept connections on port {self.port}")
        except BaseException:
            self.kill()
            raise
        if not self._user_created:
            self._create_user()
        return self

    def _create_user(self) -> None:
        conn = self.admin_connection()
        try:
            with conn.cursor() as cur:
                for host in ("127.0.0.1", "localhost"):
                    cur.execute("CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s", (self.user, host, self.password))
                    cur.execute("GRANT ALL PRIVILEGES ON `plq\\_%%`.* TO %s@%s", (self.user, host))
        finally:
            conn.close()
        self._user_created = True

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (a clean shutdown), then SIGKILL if it takes longer than ``timeout``."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        """SIGKILL, as a crash; the datadir stays for ``restart``."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def restart(self) -> MariaDBServer:
        """Stop if running, then start on the same datadir and port."""
        self.stop()
        return self.start()

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no error log)"

    # -- clients ----------------------------------------------------------------------------

    def _root_connection(self, connect_timeout: float = 5.0, database: str | None = None) -> Any:
        if self.tls_dir is not None:  # the socket: secure transport without a TLS handshake
            conn = pymysql.connect(
                unix_socket=str(self.socket_path),
                user="root",
                password="",
                database=database,
                autocommit=True,
                connect_timeout=connect_timeout,
                charset="utf8mb4",
                ssl_disabled=True,  # PyMySQL would otherwise run TLS over the socket too
                defer_connect=True,
            )
            # Connected here: PyMySQL leaks its own Unix socket when connecting it fails.
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(connect_timeout)
                sock.connect(str(self.socket_path))
            except BaseException:
                sock.close()
                raise
            conn.connect(sock)  # closes sock if the handshake fails
            return conn
        return pymysql.connect(
            host=self.host,
            port=self.port,
            user="root",
            password="",
            database=database,
            autocommit=True,
            connect_timeout=connect_timeout,
            charset="utf8mb4",
            ssl_disabled=True,  # PyMySQL's default TLS attempt costs ~0.1 s a connection
        )

    def admin_connection(self, database: str | None = None) -> Any:
        """A root connection with autocommit on, for setting up and inspecting."""
        return self._root_connection(database=database)

    def query(self, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
        """Run one statement as root (autocommit) and return its rows."""
        conn = self.admin_connection()
        try:
            with conn.cursor() as cur:
                cur.execute(sql, args)
                return list(cur.fetchall())
        finally:
            conn.close()

    def shard_entry(self, *, dequeue_only: bool = False) -> dict[str, Any]:
        """This server as one shard entry of the original MySQL JSON config."""
        endpoint = {"host": self.host, "port": self.port}
        return {
            "master": endpoint,
            "slave": dict(endpoint),
            "user": self.user,
            "passwd": self.password,
            "dequeueOnly": dequeue_only,
        }

    def drop_queue_databases(self) -> None:
        """Drop every ``plq_*`` database, leaving the server as new."""
        conn = self.admin_connection()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE 'plq\\_%'")
                for (name,) in cur.fetchall():
                    cur.execute(f"DROP DATABASE `{name}`")
        finally:
            conn.close()

    # -- context manager --------------------------------------------------------------------

    def __enter__(self) -> MariaDBServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def make_tls_files(directory: Path) -> Path:
    """A throwaway CA (``ca.pem``) and a server certificate it signed (``server.pem``,
    ``server-key.pem``) for 127.0.0.1, made with the ``openssl`` command in ``directory``."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("openssl not found: install the Debian package openssl to run the TLS tests")
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        done = subprocess.run(
            [openssl, *args], cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"openssl {args[0]} failed ({done.returncode}):\n{done.stdout[-2000:]}")

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=pinlater test CA",
        "-keyout", "ca-key.pem", "-out", "ca.pem")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "server-key.pem", "-out", "server.csr")  # fmt: skip
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
        "-days", "1", "-out", "server.pem")  # fmt: skip
    return directory


_shared_lock = threading.Lock()
_shared: MariaDBServer | None = None


def shared_server() -> MariaDBServer:
    """One server for the whole test process, started on first use, stopped at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            directory = Path(tempfile.mkdtemp(prefix="pinlater-mariadb-"))
            # No fsync: every test creates and drops databases, and file syncs would dominate.
            # Nothing here tests durability (tests that kill a server start their own).
            server = MariaDBServer(directory, extra_args=("--innodb-flush-method=nosync",))

            def cleanup() -> None:
                server.stop()
                shutil.rmtree(directory, ignore_errors=True)

            atexit.register(cleanup)
            _shared = server
        elif not _shared.running:
            _shared.start()
        return _shared
