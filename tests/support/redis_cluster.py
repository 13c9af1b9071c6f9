"""A real Redis Cluster for tests: three masters on loopback (no replicas unless asked), stopped
by PID.

    with RedisClusterNodes(tmp_path / "cluster") as cluster:
        client = cluster.client()              # redis.RedisCluster on the seeds
        slot = key_slot(b"{1:q}")
        source = cluster.owner(slot)
        target = cluster.other_than(source)
        cluster.begin_migration(slot, source, target)
        while cluster.migrate_keys(slot, source, target, batch=10):
            ...                                 # load runs in between batches
        cluster.finish_migration(slot, source, target)

Each node is a ``RedisServer`` started with ``--cluster-enabled yes`` on a port whose port + 10000
(the cluster bus) is free too; ``redis-cli --cluster create`` assigns the slots, and start-up
waits until every node reports ``cluster_state:ok`` with all 16384 slots assigned and the same
slot owners (``wait_for``, no sleeps). A slot moves as ``redis-cli --cluster reshard`` moves it:
IMPORTING on the target, MIGRATING on the source, MIGRATE of its keys in batches, then
``CLUSTER SETSLOT slot NODE target`` on the target, the source and every other master. With
replicas, ``fail_over`` kills a master and promotes its replica at once (``CLUSTER FAILOVER
TAKEOVER``).
"""

from __future__ import annotations

import atexit
import random
import shutil
import socket
import subprocess
import tempfile
import threading
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

from redis.cluster import ClusterNode, RedisCluster

from tests.support.redis_server import RedisServer
from tests.support.wait import wait_for

SLOTS = 16384
BUS_PORT_OFFSET = 10000
"""Redis Cluster's bus listens on the client port plus this."""


def cluster_port() -> int:
    """A loopback port free now whose port + 10000 (the cluster bus) is free too."""
    for _ in range(200):
        port = random.randint(20000, 65535 - BUS_PORT_OFFSET)
        with socket.socket() as a, socket.socket() as b:
            try:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + BUS_PORT_OFFSET))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port pair (port, port + 10000) found on 127.0.0.1")


def find_redis_cli() -> str:
    binary = shutil.which("redis-cli") or "/usr/bin/redis-cli"
    if not Path(binary).exists():
        raise RuntimeError("redis-cli not found: install the Debian package redis-tools (apt-get install redis-tools)")
    return binary


class RedisClusterNodes:
    """Three (or ``masters``) cluster masters on 127.0.0.1, each with ``replicas`` replicas (see
    the module docstring)."""

    host = "127.0.0.1"

    def __init__(self, directory: Path, *, masters: int = 3, replicas: int = 0, start_timeout: float = 30.0) -> None:
        self.directory = directory
        self.start_timeout = start_timeout
        self.replicas = replicas
        self.nodes: list[RedisServer] = []
        self._stack = ExitStack()
        try:
            for i in range(masters * (1 + replicas)):
                node_dir = directory / f"node-{i}"
                args = (
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", str(node_dir / "nodes.conf"),
                    "--cluster-node-timeout", "5000",
                )  # fmt: skip
                node = RedisServer(node_dir, extra_args=args, port=cluster_port(), start_timeout=start_timeout)
                self._stack.callback(node.stop)
                self.nodes.append(node)
            self._create()
        except BaseException:
            self._stack.close()
            raise

    # -- start-up ----------------------------------------------------------------------------

    def _create(self) -> None:
        addresses = [f"{self.host}:{n.port}" for n in self.nodes]
        replicas = str(self.replicas)
        command = [find_redis_cli(), "--cluster", "create", *addresses, "--cluster-replicas", replicas, "--cluster-yes"]
        done = subprocess.run(command, capture_output=True, timeout=self.start_timeout, check=False)
        if done.returncode != 0:
            out = (done.stdout + done.stderr).decode(errors="replace")[-3000:]
            raise RuntimeError(f"redis-cli --cluster create failed ({done.returncode}):\n{out}")
        self.await_stable()

    def await_stable(self) -> None:
        """Wait until every node says cluster_state:ok, all slots assigned, and all nodes agree
        on every slot's owner."""
        wait_for(self._stable, timeout=self.start_timeout, what="the cluster's nodes to agree on every slot (state ok)")

    def _stable(self) -> bool:
        owners: list[list[tuple[int, int, int]]] = []
        for node in self.live_nodes:
            with node.client() as client:
                info = client.execute_command("CLUSTER", "INFO")
                text = info.decode() if isinstance(info, bytes) else str(info)
                fields = dict(line.split(":", 1) for line in text.split() if ":" in line)
                if fields.get("cluster_state") != "ok" or fields.get("cluster_slots_assigned") != str(SLOTS):
                    return False
                ranges = client.execute_command("CLUSTER", "SLOTS")
                owners.append(sorted((int(r[0]), int(r[1]), int(r[2][1])) for r in ranges))
        return all(o == owners[0] for o in owners)

    # -- clients ---------------------------------------------------------------------------------

    @property
    def live_nodes(self) -> list[RedisServer]:
        return [node for node in self.nodes if node.running]

    @property
    def seeds(self) -> list[tuple[str, int]]:
        return [(self.host, n.port) for n in self.nodes]

    def client(self, **kwargs: Any) -> RedisCluster:
        """A new redis-py cluster client on every node as a seed (the caller closes it)."""
        nodes = [ClusterNode(host, port) for host, port in self.seeds]
        return RedisCluster(startup_nodes=nodes, socket_timeout=5.0, **kwargs)

    def node_id(self, node: RedisServer) -> str:
        with node.client() as client:
            return str(_text(client.execute_command("CLUSTER", "MYID")))

    def owner(self, slot: int) -> RedisServer:
        """The master serving ``slot`` now, as the first live node sees it."""
        with self.live_nodes[0].client() as client:
            for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if int(start) <= slot <= int(end):
                    port = int(master[1])
                    return next(n for n in self.nodes if n.port == port)
        raise AssertionError(f"slot {slot} is not assigned")

    def other_than(self, node: RedisServer) -> RedisServer:
        """Another master than ``node``."""
        masters = set(self._master_ports())
        return next(n for n in self.live_nodes if n is not node and n.port in masters)

    def _master_ports(self) -> list[int]:
        with self.live_nodes[0].client() as client:
            return [int(entry[2][1]) for entry in client.execute_command("CLUSTER", "SLOTS")]

    def replica_of(self, master: RedisServer) -> RedisServer:
        """A replica of ``master`` (with ``replicas`` > 0)."""
        for node in self.live_nodes:
            if node is master:
                continue
            with node.client() as client:
                info = client.info("replication")
            if info.get("role") == "slave" and int(info.get("master_port", 0)) == master.port:
                return node
        raise AssertionError(f"no replica of {master.port}")

    def fail_over(self, master: RedisServer) -> RedisServer:
        """Kill ``master`` and promote its replica at once (``CLUSTER FAILOVER TAKEOVER``, no
        waiting for the failure detection); wait until every live node sees the replica as the
        owner of the master's slots. The promoted replica."""
        replica = self.replica_of(master)
        master.kill()
        with replica.client() as client:
            client.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
        wait_for(lambda: master.port not in self._master_ports() and replica.port in self._master_ports(),
                 self.start_timeout, what="the replica to take over the master's slots")  # fmt: skip
        self.await_stable()
        return replica

    def flush_all(self) -> None:
        """FLUSHALL on every master (a fresh, empty cluster for the next test)."""
        for node in self.live_nodes:
            with node.client() as client:
                if client.info("replication").get("role") == "master":
                    client.flushall()

    # -- moving a slot ---------------------------------------------------------------------------

    def begin_migration(self, slot: int, source: RedisServer, target: RedisServer) -> None:
        """IMPORTING on the target, then MIGRATING on the source (the order redis-cli uses, so
        no command is ever sent ASK to a node that does not import the slot)."""
        with target.client() as client:
            client.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", self.node_id(source))
        with source.client() as client:
            client.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", self.node_id(target))

    def migrate_keys(
        self, slot: int, source: RedisServer, target: RedisServer, batch: int = 100, keys: list[bytes] | None = None
    ) -> int:
        """MIGRATE up to ``batch`` of the slot's keys still on the source (or exactly ``keys``,
        those of them still there); how many were moved (0 once none is left)."""
        with source.client() as client:
            if keys is None:
                keys = client.execute_command("CLUSTER", "GETKEYSINSLOT", slot, batch)
            else:  # (EXISTS of a key not there is answered ASK on a migrating node)
                here = set(client.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1 << 20))
                keys = [key for key in keys if key in here]
            if not keys:
                return 0
            client.execute_command("MIGRATE", target.host, target.port, "", 0, 10_000, "KEYS", *keys)
        return len(keys)

    def finish_migration(self, slot: int, source: RedisServer, target: RedisServer) -> None:
        """Give the slot to the target: SETSLOT NODE on the target, the source, then the other
        masters; then wait until every node agrees."""
        target_id = self.node_id(target)
        masters = set(self._master_ports())
        others = [n for n in self.live_nodes if n.port in masters and n is not source and n is not target]
        for node in [target, source, *others]:
            with node.client() as client:
                client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        wait_for(lambda: all(self._owner_seen_by(n, slot) == target.port for n in self.live_nodes), self.start_timeout)
        self.await_stable()

    def migrate_slot(self, slot: int, target: RedisServer, batch: int = 100) -> None:
        """Move ``slot`` with its keys to ``target`` in one go."""
        source = self.owner(slot)
        self.begin_migration(slot, source, target)
        while self.migrate_keys(slot, source, target, batch):
            pass
        self.finish_migration(slot, source, target)

    def _owner_seen_by(self, node: RedisServer, slot: int) -> int | None:
        with node.client() as client:
            for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if int(start) <= slot <= int(end):
                    return int(master[1])
        return None

    # -- lifecycle -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL); idempotent."""
        self._stack.close()

    def __enter__(self) -> RedisClusterNodes:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


_shared_lock = threading.Lock()
_shared: RedisClusterNodes | None = None


def shared_cluster() -> RedisClusterNodes:
    """One cluster for the whole test process, started on first use, stopped at exit (tests
    that need a fresh one flush it: ``flush_all``)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            directory = Path(tempfile.mkdtemp(prefix="pinlater-redis-cluster-"))
            cluster = RedisClusterNodes(directory)

            def cleanup() -> None:
                cluster.stop()
                shutil.rmtree(directory, ignore_errors=True)

            atexit.register(cleanup)
            _shared = cluster
        return _shared
