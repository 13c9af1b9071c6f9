"""From one measured shard to a cluster: how many shards and server processes a target rate needs.

The arithmetic is deliberately simple and every assumption it makes is returned with the plan
(and printed), so a reader can redo it with better numbers:

* a job costs its whole lifecycle (enqueue, dequeue, ack); the measured rate is the slowest of
  the three, and all CPU spent in the run is charged to those jobs (conservative when producers
  ran ahead of consumers);
* CPU per job is constant, so capacity = jobs per CPU-second x the cores an instance may use.
  That is what lets a run on a small shared machine (where the load generator takes cores too)
  say something about dedicated machines;
* throughput scales linearly with shards (they share nothing) and with server processes (they are
  stateless; every server talks to every shard). A server (``pinlater serve``) runs
  ``processes_per_server`` processes on one port (SERVER_PROCESSES), one event loop and about one
  core each, so the plan counts servers of that many processes and the cores they use;
* the plan provisions ``headroom`` times the target, for peaks, failover and GC.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pinlater.bench.stats import si


@dataclass(frozen=True)
class PlanInputs:
    target_per_s: float
    headroom: float
    backend: str
    #: Jobs/s through the whole lifecycle on the measured shard.
    lifecycle_per_s: float
    duration_s: float
    server_cpu_s: float | None
    #: None when the store runs inside the server (embedded) or was not measured.
    store_cpu_s: float | None
    #: Cores one server process may use (one event loop: about one).
    cores_per_server: float = 1.0
    cores_per_store: float = 1.0
    #: Processes of one ``pinlater serve`` (SERVER_PROCESSES); its CPU above counts them all.
    processes_per_server: int = 1


def make_plan(p: PlanInputs) -> dict[str, Any]:
    """The plan as a JSON-ready dict (numbers, then ``assumptions`` as sentences)."""
    need = p.target_per_s * p.headroom
    if p.lifecycle_per_s <= 0:
        return {
            "target_jobs_per_min": round(p.target_per_s * 60, 1),
            "headroom": p.headroom,
            "provisioned_jobs_per_min": round(need * 60, 1),
            "shards": None,
            "servers": None,
            "error": "no job completed its lifecycle in the run (see the errors), so there is nothing to scale",
            "assumptions": [],
        }
    jobs = p.lifecycle_per_s * p.duration_s
    per_server_cpu = jobs / p.server_cpu_s if p.server_cpu_s else None
    per_store_cpu = jobs / p.store_cpu_s if p.store_cpu_s else None
    procs = p.processes_per_server
    assumptions = [
        f"throughput scales linearly with shards and with server processes; the measurement was one shard "
        f"({p.backend}) behind one server of {procs} process{'es' if procs > 1 else ''}",
        "a job costs its whole lifecycle (enqueue + dequeue + ack): the measured rate is the slowest of the three, "
        "and all CPU of the run is charged to those jobs",
        f"provision {p.headroom:g}x the target (headroom for peaks, failover, backlog drain and GC)",
    ]
    if per_server_cpu is not None:
        server_capacity = per_server_cpu * p.cores_per_server * procs
        assumptions.append(
            f"CPU per job is constant: {per_server_cpu:,.0f} jobs per server CPU-second measured (all its processes); "
            f"one server process (one asyncio event loop) uses at most {p.cores_per_server:g} core(s), and a server "
            f"runs {procs} (SERVER_PROCESSES; --processes auto runs one per core)"
        )
    else:
        server_capacity = p.lifecycle_per_s
        assumptions.append(
            "server CPU was not measured: a server (of as many processes) is assumed to do what this run measured"
        )
    if p.backend == "embedded":
        shard_capacity = server_capacity
        assumptions.append("embedded: the store (SQLite) lives inside the server process, so a shard is a server")
    elif per_store_cpu is not None:
        shard_capacity = per_store_cpu * p.cores_per_store
        assumptions.append(
            f"{per_store_cpu:,.0f} jobs per store CPU-second measured; one store instance ({p.backend}) per shard "
            f"using at most {p.cores_per_store:g} core(s)"
            + (" (Redis runs commands on one thread)" if p.backend == "redis" else "")
        )
    else:
        shard_capacity = p.lifecycle_per_s
        assumptions.append("store CPU was not measured: a shard is assumed to do what this run measured")
    shards = max(1, math.ceil(need / shard_capacity)) if shard_capacity > 0 else None
    servers = max(1, math.ceil(need / server_capacity)) if server_capacity > 0 else None
    if p.backend == "embedded" and shards is not None and servers is not None:
        shards = servers = max(shards, servers)
    return {
        "target_jobs_per_min": round(p.target_per_s * 60, 1),
        "headroom": p.headroom,
        "provisioned_jobs_per_min": round(need * 60, 1),
        "measured_lifecycle_jobs_per_min": round(p.lifecycle_per_s * 60, 1),
        "jobs_per_server_cpu_second": _round(per_server_cpu),
        "jobs_per_store_cpu_second": _round(per_store_cpu),
        "cores_per_server": p.cores_per_server,
        "processes_per_server": procs,
        "cores_per_store": p.cores_per_store if p.backend != "embedded" else None,
        "server_capacity_jobs_per_min": round(server_capacity * 60, 1),
        "shard_capacity_jobs_per_min": round(shard_capacity * 60, 1),
        "shards": shards,
        "servers": servers,
        "server_cores": _round(servers * procs * p.cores_per_server if servers else None),
        "store_cores": _round(shards * p.cores_per_store if shards and p.backend != "embedded" else None),
        "assumptions": assumptions,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def format_plan(plan: dict[str, Any]) -> str:
    if plan.get("error"):
        return f"plan: none: {plan['error']}"
    lines = [
        f"plan: {si(plan['target_jobs_per_min'])} jobs/min target x {plan['headroom']:g} headroom "
        f"= {si(plan['provisioned_jobs_per_min'])} jobs/min to provision",
        f"  shards:  {plan['shards']}  (each ~{si(plan['shard_capacity_jobs_per_min'])} jobs/min)",
        f"  servers: {plan['servers']}  (pinlater serve of {plan.get('processes_per_server', 1)} process(es), "
        f"each ~{si(plan['server_capacity_jobs_per_min'])} jobs/min"
        f"{'; ' + format(plan['server_cores'], 'g') + ' cores in all' if plan['server_cores'] else ''})",
    ]
    if plan["store_cores"]:
        lines.append(f"  store cores: {plan['store_cores']:g}")
    lines.append("  assumptions:")
    lines += [f"    - {a}" for a in plan["assumptions"]]
    return "\n".join(lines)
