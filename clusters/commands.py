"""`magnetar up`, `magnetar down` and `magnetar status`: the operator's commands around the supervisor.

``up`` plans the deployment (every instance, every port; ports are remembered in the data dir so a later
``up`` reuses them) under the data dir's lock and runs :class:`~clusters.supervisor.Supervisor` in the
foreground. ``up --detach`` runs that same foreground ``up`` as a daemon in its own session (output to
``logs/supervisor.log``) and returns once ``state.json`` says it runs.

``down`` SIGTERMs the supervisor recorded in ``state.json`` and waits for it to go; if it is already dead
(SIGKILL-ed, crashed), ``down`` stops the recorded process groups itself. Then it checks that no recorded
process and no recorded port is left. Nothing is ever signalled except pids recorded in the data dir, and
only while their start time matches (``clusters.runtime``).

``status`` reads ``state.json`` and checks each recorded process is still the one that was started.

``up --netns`` (or ``[network] mode = "netns"``) runs every region in its own network namespace
(``clusters.network``); ``down`` then also removes the namespaces ``state.json`` records, also when the
supervisor is gone.

Exit codes: ``up`` 0 running (detached) or stopped on request (foreground), 1 refused or failed;
``down`` 0 all gone (or nothing was running), 1 something is left; ``status`` 0 everything healthy,
1 a process is dead or the supervisor is gone, 3 nothing runs.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any, Optional

from rich.console import Console
from rich.table import Table

from magnetar.net import is_listening

from . import netns
from .kinds import KINDS, Plan, make_plan
from .network import namespace_at
from .runtime import DataDir, describe_exit, group_alive, is_alive, now_iso, stop_groups
from .supervisor import DAEMON_ENV, POLL_S, Supervisor
from .supervisor import log as supervisor_log
from .topology import Topology, load

__all__ = ["down", "status", "up"]


# -- up -----------------------------------------------------------------------------------------------------


def _console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    # Rich assumes 80 columns when not on a terminal; a log or a pipe should get whole names instead.
    width = None if stream.isatty() else 200
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=width)


def _refusal(ddir: DataDir) -> Optional[str]:
    """Why a new supervisor must not start on this data dir, or None."""
    state = ddir.read_state()
    if ddir.lock_is_held():
        pid = (state or {}).get("supervisor", {}).get("pid", "?")
        return (
            f"a supervisor (pid {pid}) is already running for {ddir.root}; "
            f"see `magnetar status --data-dir {ddir.root}`, stop it with `magnetar down --data-dir {ddir.root}`"
        )
    if state:
        left = [r["name"] for r in state["processes"] if group_alive(r.get("pid"), r.get("start_ticks"))]
        if left:
            return (
                f"processes of an earlier run in {ddir.root} are still alive ({', '.join(left)}) but their "
                f"supervisor is gone; stop them with `magnetar down --data-dir {ddir.root}` first"
            )
    return None


def up(topology_path: pathlib.Path | str, data_dir: pathlib.Path | str, *, detach: bool = False,
       netns_mode: bool = False) -> int:
    """``magnetar up``: see the module docstring. Raises ConfigError for a bad topology file.

    ``netns_mode``: run the regions apart whatever the topology's ``[network] mode`` says (``--netns``).
    """
    topology = load(topology_path)
    if netns_mode:
        topology = topology.with_netns()
    ddir = DataDir(data_dir)
    ddir.prepare()
    refusal = _refusal(ddir)
    if refusal is None and topology.netns:
        why_not = netns.available()
        refusal = f"regions apart (--netns) need network namespaces: {why_not}" if why_not else None
    if refusal:
        _console(stderr=True).print(f"[red]refused:[/red] {refusal}")
        return 1
    if detach:
        # Plan here only to report a bad topology (clashing ports, names) before anything starts; the
        # supervisor plans again under its lock, and only it writes ports.json.
        return _up_detached(make_plan(topology, ddir.root, remembered=ddir.read_ports()), ddir)
    return _supervise(topology, ddir, daemon=os.environ.get(DAEMON_ENV) == "1")


def _supervise(topology: Topology, ddir: DataDir, *, daemon: bool) -> int:
    lock_fd = ddir.try_lock()
    if lock_fd is None:
        _console(stderr=True).print(f"[red]refused:[/red] {_refusal(ddir) or 'another supervisor holds the lock'}")
        return 1
    try:
        plan = make_plan(topology, ddir.root, remembered=ddir.read_ports())
        ddir.write_ports({inst.name: dict(inst.ports) for inst in plan.instances})
    except BaseException:
        os.close(lock_fd)
        raise
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if not daemon:  # the daemon's stderr already is supervisor.log
        handlers.append(logging.FileHandler(ddir.supervisor_log))
    formatter = logging.Formatter("%(asctime)s %(levelname)s supervisor: %(message)s")
    for handler in handlers:
        handler.setFormatter(formatter)
        supervisor_log.addHandler(handler)
    supervisor_log.setLevel(logging.INFO)
    supervisor_log.propagate = False
    try:
        supervisor = Supervisor(plan, ddir)

        def announce() -> None:
            _print_summary(ddir, supervisor.state, foreground=True)

        return supervisor.run(on_running=None if daemon else announce)
    finally:
        for handler in handlers:
            supervisor_log.removeHandler(handler)
            handler.close()
        os.close(lock_fd)


def _up_detached(plan: Plan, ddir: DataDir) -> int:
    topology = plan.topology
    argv = [sys.executable, "-m", "magnetar", "up", str(topology.path), "--data-dir", str(ddir.root),
            *(["--netns"] if topology.netns else [])]
    env = dict(os.environ, PYTHONUNBUFFERED="1", **{DAEMON_ENV: "1"})
    with open(ddir.supervisor_log, "ab") as out:
        out.write(f"\n===== {now_iso()} detached supervisor: {' '.join(argv)}\n".encode())
        out.flush()
        daemon = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    err = _console(stderr=True)
    n_tiers = len(plan.tiers())
    deadline = time.monotonic() + topology.supervisor.startup_timeout_s * n_tiers + 60
    state: Optional[dict[str, Any]] = None
    try:
        while True:
            state = ddir.read_state()
            ours = state is not None and state["supervisor"]["pid"] == daemon.pid
            if ours and state["status"] == "running":
                _print_summary(ddir, state, foreground=False)
                daemon.returncode = 0  # it lives on, detached; keep Popen from warning about it
                return 0
            if (ours and state["status"] in ("failed", "stopped")) or daemon.poll() is not None:
                break
            if time.monotonic() > deadline:
                err.print("[red]the supervisor did not report within its deadline; stopping it[/red]")
                daemon.send_signal(signal.SIGTERM)
                break
            time.sleep(POLL_S)
    except KeyboardInterrupt:  # the operator gave up on this `up`: so does the supervisor
        err.print("interrupted; stopping the supervisor and what it started")
        daemon.send_signal(signal.SIGTERM)
    try:  # it stops what it started before exiting
        daemon.wait(timeout=topology.supervisor.stop_grace_s * n_tiers + 30)
    except subprocess.TimeoutExpired:
        daemon.kill()
    state = ddir.read_state()
    ours = state is not None and state["supervisor"]["pid"] == daemon.pid
    err.print(f"[red]magnetar up failed:[/red] {state['message'] if ours else 'the supervisor exited early'}")
    failed = next((r for r in state["processes"] if r["name"] == state.get("failed_process")), None) if ours else None
    if failed is not None and failed["pid"]:
        err.print(f"--- last lines of {failed['log']} ---", markup=False)
        err.print(ddir.log_tail(failed["log"]), markup=False)
    err.print(f"--- last lines of {ddir.supervisor_log} ---", markup=False)
    err.print(ddir.log_tail(ddir.supervisor_log, 20), markup=False)
    if ours and any(group_alive(r.get("pid"), r.get("start_ticks")) for r in state["processes"]):
        down(ddir.root)
    return 1


def _print_summary(ddir: DataDir, state: dict[str, Any], *, foreground: bool) -> None:
    out = _console()
    out.print(_table(state, title=f"{state['name']}: running (supervisor pid {state['supervisor']['pid']})"))
    _print_network(state, out)
    out.print(f"endpoints: {ddir.topology_path}", markup=False)
    for record in state["processes"]:
        if record["kind"] == "prometheus":
            out.print(f"prometheus: {record['endpoints']['url']}", markup=False)
    out.print(f"logs:      {ddir.logs}", markup=False)
    stop = f"magnetar down --data-dir {ddir.root}"
    out.print(f"stop with: {'Ctrl-C, or ' if foreground else ''}{stop}", markup=False)


# -- status -------------------------------------------------------------------------------------------------


def _effective(record: dict[str, Any]) -> str:
    """The state to show: the recorded one, corrected when the supervisor could not record a death."""
    state = record["state"]
    if state in ("starting", "running") and not is_alive(record["pid"], record["start_ticks"]):
        return "dead"
    if state in ("exited", "stopped") and group_alive(record["pid"], record["start_ticks"]):
        return "leftover"  # its leader is gone but something in its process group still runs
    return state


def _state_text(record: dict[str, Any], effective: str) -> str:
    if effective == "exited":
        return f"exited with {describe_exit(record['exit_code'])}"
    if effective == "dead":
        return "dead (exit not recorded: the supervisor is gone)"
    if effective == "stopped":
        return f"stopped ({describe_exit(record['exit_code'])})"
    if effective == "leftover":
        return "exited, but its process group still runs"
    if effective == "pending":
        return "not started"
    return effective


def _endpoint_text(record: dict[str, Any]) -> str:
    kind = KINDS.get(record["kind"])
    keys = kind.shown if kind else tuple(k for k, v in record["endpoints"].items() if isinstance(v, str))
    return "  ".join(str(record["endpoints"][k]) for k in keys if k in record["endpoints"])


def _table(state: dict[str, Any], *, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("name", "kind", "region", "pid", "state", "endpoints"):
        table.add_column(column, overflow="fold")  # a narrow terminal wraps names and addresses, never cuts them
    for record in state["processes"]:
        effective = _effective(record)
        style = "green" if effective == "running" else ("red" if effective in ("exited", "dead", "leftover") else "")
        table.add_row(
            record["name"], record["kind"], record["region"] or "(global)", str(record["pid"] or "-"),
            f"[{style}]{_state_text(record, effective)}[/{style}]" if style else _state_text(record, effective),
            _endpoint_text(record),
        )
    return table


def status(data_dir: pathlib.Path | str, *, as_json: bool = False) -> int:
    """``magnetar status``: 0 when every process and the supervisor run, 1 when not, 3 when nothing runs."""
    ddir = DataDir(data_dir)
    state = ddir.read_state()
    out = _console()
    if state is None:
        if as_json:
            print(json.dumps({"data_dir": str(ddir.root), "status": "absent", "processes": []}, indent=2))
        else:
            out.print(f"nothing has run in {ddir.root} (no state.json)", markup=False)
        return 3
    sup = state["supervisor"]
    sup_alive = is_alive(sup["pid"], sup["start_ticks"])
    rows = [(r, _effective(r)) for r in state["processes"]]
    anything_alive = sup_alive or any(group_alive(r["pid"], r["start_ticks"]) for r in state["processes"])
    if sup_alive and state["status"] == "running" and all(e == "running" for _, e in rows):
        code = 0
    elif not anything_alive and state["status"] in ("stopped", "failed"):
        code = 3
    else:
        code = 1
    if as_json:
        report = {
            "name": state["name"],
            "data_dir": state["data_dir"],
            "status": state["status"] if sup_alive or state["status"] in ("stopped", "failed") else "supervisor-gone",
            "message": state["message"],
            "supervisor": {**sup, "alive": sup_alive},
            "processes": [{**r, "state": e, "recorded_state": r["state"]} for r, e in rows],
            "network": state.get("network"),
            "exit_code": code,
        }
        print(json.dumps(report, indent=2))
        return code
    if sup_alive:
        title = f"{state['name']}: {state['status']} (supervisor pid {sup['pid']})"
    else:
        title = f"{state['name']}: {state['status']}, supervisor (pid {sup['pid']}) is gone"
    out.print(_table(state, title=title))
    _print_network(state, out)
    if state["message"]:
        out.print(state["message"], markup=False)
    if code == 1 and not sup_alive and anything_alive:
        out.print(f"processes are left without a supervisor: `magnetar down --data-dir {ddir.root}` stops them", markup=False)
    return code


def _print_network(state: dict[str, Any], out: Console) -> None:
    """With regions apart: each region's namespace and addresses, and the link between regions."""
    network = state.get("network")
    if not network:
        return
    out.print(f"regions apart: {network['latency_ms']:g} ± {network['jitter_ms']:g} ms each way between regions "
              f"(wan relay, `magnetar netns cut|heal`); configuration store and relay in namespace "
              f"{network['wan_namespace']}", markup=False)
    for name, region in network["regions"].items():
        out.print(f"  {name}: namespace {region['namespace']}, clients use {region['public_address']}, servers and "
                  f"probes {region['direct_address']}", markup=False)


# -- down ---------------------------------------------------------------------------------------------------


def down(data_dir: pathlib.Path | str) -> int:
    """``magnetar down``: stop the supervisor (or, if it is gone, its processes) and check nothing is left."""
    ddir = DataDir(data_dir)
    out = _console()
    state = ddir.read_state()
    if state is None:
        out.print(f"nothing is running in {ddir.root} (no state.json)", markup=False)
        return 0
    sup = state["supervisor"]
    started = lambda st: [r for r in st["processes"] if r.get("pid")]  # noqa: E731
    if not is_alive(sup["pid"], sup["start_ticks"]) and not any(
        group_alive(r["pid"], r["start_ticks"]) for r in started(state)
    ):
        out.print(f"nothing is running in {ddir.root}", markup=False)
        return _remove_network(ddir, state, out)
    grace_s = float(state.get("stop_grace_s", 10.0))
    if is_alive(sup["pid"], sup["start_ticks"]):
        out.print(f"stopping the supervisor (pid {sup['pid']}) ...", markup=False)
        os.kill(sup["pid"], signal.SIGTERM)
        deadline = time.monotonic() + float(state.get("stop_timeout_s", 60))
        while is_alive(sup["pid"], sup["start_ticks"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        if is_alive(sup["pid"], sup["start_ticks"]):
            out.print("the supervisor did not stop in time; killing it", markup=False)
            # Only its pid: run in the foreground, its process group may be a shell's job.
            os.kill(sup["pid"], signal.SIGKILL)
        state = ddir.read_state() or state  # it may have started processes after our first read
    else:
        out.print(f"the supervisor (pid {sup['pid']}) is gone; stopping its processes", markup=False)
    left = [r for r in reversed(started(state)) if group_alive(r["pid"], r["start_ticks"])]
    if left:
        _stop_by_tier(left, grace_s=grace_s)
        for record in left:
            if record["state"] in ("pending", "starting", "running"):
                record.update(state="stopped", ended_at=now_iso())
        state.update(status="stopped", message="stopped by `magnetar down` (the supervisor was gone)")
        ddir.write_state(state)
    code = _verify_gone(ddir, state, out)
    return max(code, _remove_network(ddir, state, out))


def _stop_by_tier(records: list[dict[str, Any]], *, grace_s: float) -> None:
    """Stops the processes of ``records`` as their supervisor would: tier by tier, the highest first, every group of
    a tier at once. Brokers then close while their bookies and ZooKeeper still answer, and bookies while ZooKeeper
    does; all at once, brokers took 8 s and bookies more than a grace period over a ZooKeeper already gone."""
    unknown = max(k.tier for k in KINDS.values()) + 1  # a kind this version does not know: stopped first
    tiers: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        kind = KINDS.get(record.get("kind", ""))
        tiers.setdefault(kind.tier if kind is not None else unknown, []).append(record)
    for tier in sorted(tiers, reverse=True):
        stop_groups([(r["pid"], r["start_ticks"]) for r in tiers[tier]], grace_s=grace_s)


def _remove_network(ddir: DataDir, state: dict[str, Any], out: Console) -> int:
    """Removes the namespaces of a deployment whose regions were apart (all of its prefix): 0 when none is left.

    Its supervisor removes them when it stops; this is for a supervisor that was killed, or died half way."""
    network = state.get("network")
    if not network or not netns.namespaces_with_prefix(network["prefix"]):
        return 0
    left = netns.remove(netns.Layout.from_document(network))
    if left:
        out.print(f"network namespaces left: {', '.join(left)} (removing them needs root)", markup=False)
        return 1
    out.print(f"removed the network namespaces of {ddir.root} ({network['prefix']}*)", markup=False)
    return 0


def _verify_gone(ddir: DataDir, state: dict[str, Any], out: Console) -> int:
    """Waits (bounded) until no recorded process runs and no recorded port listens."""
    records = [r for r in state["processes"] if r.get("pid")]
    sup = state["supervisor"]
    network = state.get("network")
    deadline = time.monotonic() + 10
    while True:
        alive = [r["name"] for r in records if group_alive(r["pid"], r["start_ticks"])]
        if is_alive(sup["pid"], sup["start_ticks"]):
            alive.append(f"the supervisor (pid {sup['pid']})")
        present = set(netns.namespaces_with_prefix(network["prefix"])) if network else set()
        listening = [
            f"{port} ({r['name']} {name})"
            for r in records
            if not network or namespace_at(network, r["host"]) in (None, *present)  # a gone one hears nothing
            for name, port in r["ports"].items()
            if port and is_listening(r["host"], port, timeout_s=0.2)
        ]
        if not alive and not listening:
            out.print(f"stopped: every process is gone ({len(records)}), no port left listening", markup=False)
            return 0
        if time.monotonic() > deadline:
            if alive:
                out.print(f"still running: {', '.join(alive)}", markup=False)
            if listening:
                out.print(f"still listening: {', '.join(listening)}", markup=False)
            return 1
        time.sleep(0.1)
