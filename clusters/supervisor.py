"""The supervisor: the foreground process behind `magnetar up` that runs a topology as local processes.

Theory of operation. :class:`Supervisor` gets a plan (every instance, every port) and supervises in the
foreground: it makes a secured topology's CA, certificates and tokens if they are missing
(``clusters.security``), then starts each tier of process kinds (ZooKeepers, bookies, brokers, proxies, the
deployment's Prometheus) with
every process in its own session and log file, waits until the whole tier is healthy, writes
``topology.json``, and watches. It restarts nothing: a child that dies is logged (``<name> exited with
code -9 (SIGKILL)``) and recorded in ``state.json``, where ``status`` reports it. SIGTERM, SIGINT or SIGHUP
stops every child, tiers in reverse, each process group SIGTERM-ed and then SIGKILL-ed after a grace period.

With regions apart (``[network] mode = "netns"``, ``clusters.network``) it also builds the deployment's network
namespaces before the first tier (the layout is in ``state.json`` before anything is built), runs each process
inside its namespace, and removes the namespaces once every process has stopped.

The commands around it (``up`` planning under the data dir's lock, ``up --detach``, ``down``, ``status``)
are in :mod:`clusters.commands`.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from typing import Any, Optional

from magnetar.errors import MagnetarError
from magnetar.net import is_listening

from . import netns, security
from .kinds import Instance, Plan
from .network import network_document
from .runtime import (
    STATE_VERSION,
    DataDir,
    describe_exit,
    now_iso,
    signal_name,
    start_ticks,
    stop_groups,
    write_json_atomically,
)

log = logging.getLogger("clusters.supervisor")

DAEMON_ENV = "MAGNETAR_SUPERVISOR_DAEMON"  # set for the detached supervisor: its stderr is supervisor.log
POLL_S = 0.1
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _Child:
    """A started instance: its Popen (the supervisor is its parent, so it alone learns the exit code)."""

    def __init__(self, inst: Instance, popen: subprocess.Popen, record: dict[str, Any]) -> None:
        self.inst = inst
        self.popen = popen
        self.record = record


class Supervisor:
    """Starts a plan tier by tier, watches it, and stops it; the state file is its public record."""

    def __init__(self, plan: Plan, data_dir: DataDir) -> None:
        self.plan = plan
        self.dir = data_dir
        self.children: dict[str, _Child] = {}
        self.stop_signal: Optional[int] = None
        self.network_built = False  # only namespaces this supervisor built are removed when it stops
        self.state = self._initial_state()

    # -- state --------------------------------------------------------------------------------------------

    def _initial_state(self) -> dict[str, Any]:
        pid = os.getpid()
        return {
            "version": STATE_VERSION,
            "name": self.plan.topology.name,
            "topology_file": str(self.plan.topology.path),
            "data_dir": str(self.dir.root),
            "status": "starting",
            "message": "",
            "failed_process": None,
            "stop_grace_s": self.plan.topology.supervisor.stop_grace_s,
            # how long `down` waits for this supervisor: each tier's grace plus the wait after SIGKILL
            "stop_timeout_s": len(self.plan.tiers()) * (self.plan.topology.supervisor.stop_grace_s + 10) + 10,
            "supervisor": {
                "pid": pid,
                "start_ticks": start_ticks(pid),
                "started_at": now_iso(),
                "log": str(self.dir.supervisor_log),
            },
            "processes": [self._record(inst) for inst in self.plan.instances],
            # with regions apart: the namespaces, recorded before they are built (`down` removes them)
            "network": network_document(self.plan),
        }

    def _record(self, inst: Instance) -> dict[str, Any]:
        return {
            "name": inst.name,
            "kind": inst.kind,
            "region": inst.region,
            "host": inst.host,
            "ports": dict(inst.ports),
            "endpoints": self.plan.endpoints(inst),
            "log": str(self.plan.log_path(inst)),
            "data_dir": str(self.plan.process_dir(inst)),
            "state": "pending",  # pending -> starting -> running -> exited (on its own) | stopped
            "pid": None,
            "start_ticks": None,
            "started_at": None,
            "exit_code": None,
            "signal": None,
            "ended_at": None,
        }

    def _save(self, status: Optional[str] = None, message: Optional[str] = None) -> None:
        if status is not None:
            self.state["status"] = status
        if message is not None:
            self.state["message"] = message
        self.dir.write_state(self.state)

    # -- the whole life -----------------------------------------------------------------------------------

    def run(self, *, on_running=None) -> int:
        """Starts everything, then supervises until a stop signal. Returns the exit code for ``up``."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _STOP_SIGNALS}
        self.dir.topology_path.unlink(missing_ok=True)  # endpoints of an earlier run are not current
        self._save()
        log.info("supervisor pid %d starting %s (%d processes)", os.getpid(), self.plan.topology.name, len(self.plan.instances))
        code = 0
        try:
            failure = self._start_all()
            if failure is not None:
                name, message = failure
                self.state["failed_process"] = name
                log.error("startup failed: %s", message)
                child = self.children.get(name) if name is not None else None
                if child is not None:
                    log.error("last lines of %s:\n%s", child.record["log"], self.dir.log_tail(child.record["log"]))
                self._stop_everything()
                self._save("stopped" if self.stop_signal is not None else "failed", message)
                return 1
            self._write_topology()
            self._save("running", "")
            log.info("all %d processes healthy; topology in %s", len(self.children), self.dir.topology_path)
            if on_running is not None:
                on_running()
            self._watch()
            log.info("stopping on %s", signal.Signals(self.stop_signal).name)
            self._save("stopping")
            self._stop_everything()
            self._save("stopped", f"stopped on {signal.Signals(self.stop_signal).name}")
        except BaseException:
            log.exception("supervisor failed; stopping every process")
            self._stop_everything()
            self._save("failed", "the supervisor itself failed; see its log")
            code = 1
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            log.info("supervisor exits")
        return code

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Only a flag: everything else happens in the main loop, which polls it every POLL_S.
        if self.stop_signal is None:
            self.stop_signal = signum

    # -- starting -----------------------------------------------------------------------------------------

    def _start_all(self) -> Optional[tuple[Optional[str], str]]:
        """Starts tier after tier; returns (failing process or None, why) on failure, None on success."""
        timeout_s = self.plan.topology.supervisor.startup_timeout_s
        if self.plan.network is not None:
            failure = self._build_network()
            if failure is not None:
                return None, failure
        if self.plan.topology.secured:
            try:
                self._prepare_security()
            except (MagnetarError, OSError) as err:
                return None, f"cannot make the deployment's certificates and tokens: {err}"
        for tier in self.plan.tiers():
            for inst in tier:
                for port_name, port in inst.ports.items():
                    if is_listening(inst.host, port, timeout_s=0.2):
                        return inst.name, (
                            f"port {port} ({inst.name} {port_name}) is already in use by another program; "
                            f"free it, or remove {self.dir.ports_path} to pick new ports"
                        )
                try:
                    self._spawn(inst)
                except (MagnetarError, OSError) as err:  # e.g. a program that is not installed
                    return None, f"cannot start {inst.name}: {err}"
            failure = self._await_healthy(tier, deadline=time.monotonic() + timeout_s, timeout_s=timeout_s)
            if failure is not None:
                return failure
        return None

    def _build_network(self) -> Optional[str]:
        """Builds the deployment's namespaces; returns why not on failure (nothing of them left then)."""
        layout = self.plan.network
        why_not = netns.available()
        if why_not:
            return f"regions apart (network mode netns) need network namespaces: {why_not}"
        left = netns.namespaces_with_prefix(layout.prefix)
        if left:
            return (f"network namespaces of an earlier run of {self.dir.root} are left ({', '.join(left)}); "
                    f"remove them with `magnetar down --data-dir {self.dir.root}`")
        self.network_built = True
        try:
            netns.build(layout)
        except netns.NetnsError as err:
            return f"cannot make the deployment's network namespaces: {err}"
        self.state["network"]["built_at"] = now_iso()
        self._save()
        s = self.plan.topology.network
        log.info("network namespaces %s built; %g ± %g ms between regions through the wan relay",
                 ", ".join(layout.namespaces()), s.latency_ms, s.jitter_ms)
        return None

    def _prepare_security(self) -> None:
        """The CA, certificates and tokens the processes' configs name, made at the first ``up`` (kept after)."""
        directory = self.plan.security.directory
        _, made = security.ensure(directory, hosts=self.plan.hosts())
        if made:
            log.info("security material in %s: made %s", directory, ", ".join(made))
        else:
            log.info("security material in %s: kept from an earlier up", directory)

    def _spawn(self, inst: Instance) -> None:
        argv = [*self.plan.exec_prefix(inst), *self.plan.kind(inst).command(inst, self.plan)]
        self.plan.process_dir(inst).mkdir(parents=True, exist_ok=True)
        log_path = self.plan.log_path(inst)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop(DAEMON_ENV, None)
        with open(log_path, "ab") as out:
            out.write(f"\n===== {now_iso()} started by the supervisor: {' '.join(argv)}\n".encode())
            out.flush()
            popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        record = next(r for r in self.state["processes"] if r["name"] == inst.name)
        record.update(
            state="starting", pid=popen.pid, start_ticks=start_ticks(popen.pid), started_at=now_iso(),
            exit_code=None, signal=None, ended_at=None,
        )
        self.children[inst.name] = _Child(inst, popen, record)
        self._save()
        log.info("%s started (pid %d), log %s", inst.name, popen.pid, log_path)

    def _await_healthy(self, tier: list[Instance], *, deadline: float, timeout_s: float):
        waiting = list(tier)
        while waiting:
            if self.stop_signal is not None:
                return None, f"interrupted by {signal.Signals(self.stop_signal).name} while starting"
            for inst in list(waiting):
                child = self.children[inst.name]
                if child.popen.poll() is not None:
                    self._record_exit(child, state="exited")
                    return inst.name, f"{inst.name} exited with {describe_exit(child.popen.returncode)} before it was healthy"
                if self.plan.kind(inst).is_healthy(inst, self.plan):
                    waiting.remove(inst)
                    child.record["state"] = "running"
                    self._save()
                    log.info("%s healthy", inst.name)
            if waiting and time.monotonic() > deadline:
                names = ", ".join(i.name for i in waiting)
                return waiting[0].name, f"{names} not healthy within {timeout_s:g} s"
            if waiting:
                time.sleep(POLL_S)
        return None

    def _write_topology(self) -> None:
        write_json_atomically(self.dir.topology_path, topology_document(self.plan, self.state))

    # -- watching and stopping ----------------------------------------------------------------------------

    def _watch(self) -> None:
        """Until a stop signal: notices children that exit. It never restarts one."""
        while self.stop_signal is None:
            for child in self.children.values():
                if child.record["state"] == "running" and child.popen.poll() is not None:
                    self._record_exit(child, state="exited")
                    log.error("%s exited with %s; not restarting it", child.inst.name, describe_exit(child.popen.returncode))
                    self._save()
            time.sleep(POLL_S)

    def _record_exit(self, child: _Child, *, state: str) -> None:
        code = child.popen.returncode
        child.record.update(state=state, exit_code=code, signal=signal_name(code), ended_at=now_iso())

    def _stop_everything(self) -> None:
        self._stop_all()
        if self.network_built:
            self.network_built = False
            left = netns.remove(self.plan.network)
            self.state["network"]["removed_at"] = now_iso()
            if left:
                log.error("network namespaces left after removing them: %s", ", ".join(left))
            else:
                log.info("network namespaces removed")
            self._save()

    def _stop_all(self) -> None:
        """Stops tiers in reverse order; within a tier every group at once (SIGTERM, grace, SIGKILL)."""
        grace_s = self.plan.topology.supervisor.stop_grace_s
        for tier in reversed(self.plan.tiers()):
            started = [self.children[i.name] for i in tier if i.name in self.children]
            live = [c for c in started if c.record["state"] in ("starting", "running")]
            if not live:
                continue
            log.info("stopping %s", ", ".join(c.inst.name for c in live))
            stop_groups(
                [(c.popen.pid, c.record["start_ticks"]) for c in live],
                grace_s=grace_s,
                poll=lambda: [c.popen.poll() for c in live],
            )
            for child in live:
                child.popen.poll()
                self._record_exit(child, state="stopped")
                log.info("%s stopped (%s)", child.inst.name, describe_exit(child.popen.returncode))
            self._save()


def topology_document(plan: Plan, state: dict[str, Any]) -> dict[str, Any]:
    """``topology.json``: every endpoint of every process, grouped by region (deployment-wide ones on top)."""
    records = {r["name"]: r for r in state["processes"]}
    doc: dict[str, Any] = {
        "name": plan.topology.name,
        "topology_file": str(plan.topology.path),
        "data_dir": str(plan.data_dir),
        "supervisor_pid": state["supervisor"]["pid"],
        "state_file": str(plan.data_dir / "state.json"),
        "written_at": now_iso(),
    }
    if plan.topology.global_zookeeper is not None:
        doc["global_zookeeper"] = None  # filled below; placed before the regions for readers
    if plan.topology.secured:
        doc["security"] = plan.security.document()
    if plan.network is not None:
        doc["network"] = network_document(plan)
        doc["wan_relay"] = None  # filled below
    doc["regions"] = {region.name: {} for region in plan.topology.regions}
    for inst in plan.instances:
        record = records[inst.name]
        entry = {
            "name": inst.name,
            "kind": inst.kind,
            **plan.endpoints(inst),
            "pid": record["pid"],
            "log": record["log"],
            "data_dir": record["data_dir"],
        }
        target = doc if inst.region is None else doc["regions"][inst.region]
        if inst.many:
            target.setdefault(inst.slot, []).append(entry)
        else:
            target[inst.slot] = entry
    return doc
