"""``magnetar admin bookies``: a region's bookies and auto-recovery, straight from the region's ZooKeeper.

As BookKeeper's shell does, these commands talk to the region's metadata store (``--zookeeper``, or the
region's ZooKeeper in ``--data-dir``'s ``topology.json`` with ``--region``), not to a broker:

* ``list`` — registered bookies (writable, read-only), missing ones (named by ledgers, not registered) and
  those marked for decommission;
* ``decommission ID`` — marks the bookie: new ledgers avoid it... (see docs/autorecovery.md), the auditor
  records every fragment it holds and the workers copy them away; ``--wait`` returns once no ledger names
  it (then the bookie may be stopped); ``recommission ID`` takes the mark back;
* ``list-underreplicated`` — the records: ledger, fragments, reason, since when, the worker holding its lock;
* ``autorecovery enable|disable|status``.

Errors print one line and exit 1; a malformed bookie id exits 2 before anything is changed.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import time
from typing import Any, Optional

import typer

from magnetar.admin_cli_common import JsonOpt, emit

bookies_app = typer.Typer(help="A region's bookies and auto-recovery (talks to the region's ZooKeeper).",
                          no_args_is_help=True)
autorecovery_app = typer.Typer(help="Pause or resume auto-recovery in a region.", no_args_is_help=True)
bookies_app.add_typer(autorecovery_app, name="autorecovery")

ZkOpt = typer.Option(None, "--zookeeper", envvar="MAGNETAR_ZOOKEEPER",
                     help="The region's ZooKeeper (host:port[/chroot]).")
DataDirOpt = typer.Option(None, "--data-dir", help="A deployment's data dir (its topology.json names the ZooKeeper).")
RegionOpt = typer.Option(None, "--region", help="The region in --data-dir (default: the first).")


def _fail(message: str, code: int = 1) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=code)


def zookeeper_of(zookeeper: Optional[str], data_dir: Optional[pathlib.Path], region: Optional[str]) -> str:
    if zookeeper:
        return zookeeper
    if data_dir is None:
        _fail("give --zookeeper (or $MAGNETAR_ZOOKEEPER), or --data-dir of a deployment", 2)
    path = pathlib.Path(data_dir) / "topology.json"
    try:
        regions = json.loads(path.read_text()).get("regions") or {}
    except (OSError, ValueError) as err:
        _fail(f"cannot read {path}: {err}")
    if not regions:
        _fail(f"{path} lists no region")
    name = region or next(iter(regions))
    if name not in regions:
        _fail(f"{path} has no region {name!r} (it has {', '.join(regions)})")
    zk = (regions[name].get("zookeeper") or {}).get("connect")
    if not zk:
        _fail(f"{path}: region {name} has no zookeeper")
    return zk


def _run(connect: str, action) -> Any:
    from config_store import KazooMetadataStore, MetadataError

    async def main() -> Any:
        store = KazooMetadataStore(connect, connect_timeout_ms=10_000, operation_timeout_ms=15_000)
        await store.start()
        try:
            return await action(store)
        finally:
            await store.close()

    try:
        return asyncio.run(main())
    except MetadataError as err:
        _fail(str(err))


def _check_bookie_id(bookie_id: str) -> None:
    from config_store.configuration import check_name
    from config_store.errors import InvalidMetadataError

    try:
        check_name("bookie id", bookie_id)
    except InvalidMetadataError as err:
        _fail(str(err), 2)


async def bookies_status(store) -> dict[str, Any]:
    """Every bookie the region knows of, by state."""
    from bookie.autorecovery import UnderReplicationStore
    from config_store import RegionStore

    region, ur = RegionStore(store), UnderReplicationStore(store)
    return {
        "writable": sorted(await region.list_bookies()),
        "readOnly": sorted(await region.list_bookies(read_only=True)),
        "missing": {b: since for b, since in sorted((await ur.missing_since()).items())},
        "decommissioning": sorted(await ur.decommissioning()),
        "autorecoveryEnabled": await ur.enabled(),
        "auditor": await ur.auditor(),
    }


async def ledgers_naming(store, bookie_id: str) -> list[int]:
    """Ledgers whose metadata still names the bookie."""
    from config_store import NotFoundError, RegionStore

    region = RegionStore(store)
    out = []
    for lid in await region.list_ledgers():
        try:
            md = (await region.read_ledger(lid)).value
        except NotFoundError:
            continue
        if any(bookie_id in bookies for _first, bookies in md.ensembles):
            out.append(lid)
    return out


@bookies_app.command("list")
def list_bookies(zookeeper: Optional[str] = ZkOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                 region: Optional[str] = RegionOpt, as_json: bool = JsonOpt) -> None:
    """Registered, missing and decommissioning bookies, and whether auto-recovery runs."""
    emit(_run(zookeeper_of(zookeeper, data_dir, region), bookies_status), as_json, title="bookies")


@bookies_app.command()
def decommission(bookie_id: str = typer.Argument(..., help="The bookie's id."),
                 wait: bool = typer.Option(False, "--wait", help="Return once no ledger names the bookie."),
                 timeout_s: float = typer.Option(3600.0, "--timeout-s", help="How long --wait waits."),
                 zookeeper: Optional[str] = ZkOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                 region: Optional[str] = RegionOpt) -> None:
    """Re-replicate everything the bookie holds elsewhere; afterwards it may be stopped for good."""
    from bookie.autorecovery import UnderReplicationStore

    _check_bookie_id(bookie_id)
    connect = zookeeper_of(zookeeper, data_dir, region)

    async def mark(store) -> None:
        await UnderReplicationStore(store).decommission(bookie_id)

    _run(connect, mark)
    typer.echo(f"bookie {bookie_id} marked for decommission")
    if not wait:
        return
    deadline = time.monotonic() + timeout_s
    while True:
        left = _run(connect, lambda store: ledgers_naming(store, bookie_id))
        if not left:
            typer.echo(f"bookie {bookie_id}: no ledger names it any more; it may be stopped")
            return
        if time.monotonic() > deadline:
            _fail(f"bookie {bookie_id}: {len(left)} ledgers still name it after {timeout_s:g} s "
                  f"(open ledgers wait until their writer closes them): {left[:20]}")
        typer.echo(f"bookie {bookie_id}: {len(left)} ledgers still name it")
        time.sleep(2.0)


@bookies_app.command()
def recommission(bookie_id: str = typer.Argument(..., help="The bookie's id."),
                 zookeeper: Optional[str] = ZkOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                 region: Optional[str] = RegionOpt) -> None:
    """Takes back a decommission mark (fragments already moved stay where they are)."""
    from bookie.autorecovery import UnderReplicationStore

    _check_bookie_id(bookie_id)
    _run(zookeeper_of(zookeeper, data_dir, region), lambda store: UnderReplicationStore(store).recommission(bookie_id))
    typer.echo(f"bookie {bookie_id}: decommission mark removed")


async def underreplicated(store) -> list[dict[str, Any]]:
    from bookie.autorecovery import UnderReplicationStore

    ur = UnderReplicationStore(store)
    out = []
    for record in await ur.list_records():
        out.append({"ledgerId": record.ledger_id, "sinceMs": record.since_ms,
                    "lockedBy": await ur.lock_owner(record.ledger_id),
                    "fragments": [{"firstEntryId": f.first_entry_id, "bookie": f.bookie, "reason": f.reason}
                                  for f in record.fragments]})
    return out


@bookies_app.command("list-underreplicated")
def list_underreplicated(zookeeper: Optional[str] = ZkOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                         region: Optional[str] = RegionOpt, as_json: bool = JsonOpt) -> None:
    """Ledgers with a fragment below its write quorum, and which worker holds each."""
    records = _run(zookeeper_of(zookeeper, data_dir, region), underreplicated)
    if as_json:
        emit(records, True)
        return
    if not records:
        typer.echo("no under-replicated ledger")
        return
    now_ms = time.time() * 1000
    for r in records:
        frags = ", ".join(f"{f['firstEntryId']}/{f['bookie']} ({f['reason']})" for f in r["fragments"])
        lock = f", locked by {r['lockedBy']}" if r["lockedBy"] else ""
        typer.echo(f"ledger {r['ledgerId']}: {frags}; for {(now_ms - r['sinceMs']) / 1000:.0f} s{lock}")


def _set_enabled(enabled: bool, zookeeper, data_dir, region) -> None:
    from bookie.autorecovery import UnderReplicationStore

    _run(zookeeper_of(zookeeper, data_dir, region), lambda store: UnderReplicationStore(store).set_enabled(enabled))
    typer.echo(f"auto-recovery {'enabled' if enabled else 'disabled'}")


@autorecovery_app.command()
def enable(zookeeper: Optional[str] = ZkOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
           region: Optional[str] = RegionOpt) -> None:
    """Resume marking and copying."""
    _set_enabled(True, zookeeper, data_dir, region)


@autorecovery_app.command()
def disable(zookeeper: Optional[str] = ZkOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
            region: Optional[str] = RegionOpt) -> None:
    """Pause marking and copying (e.g. during planned maintenance longer than the grace period)."""
    _set_enabled(False, zookeeper, data_dir, region)


@autorecovery_app.command()
def status(zookeeper: Optional[str] = ZkOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
           region: Optional[str] = RegionOpt, as_json: bool = JsonOpt) -> None:
    """Whether auto-recovery runs, who audits, what is under-replicated."""
    async def both(store) -> dict[str, Any]:
        state = await bookies_status(store)
        state["underReplicatedLedgers"] = len(await underreplicated(store))
        return state

    emit(_run(zookeeper_of(zookeeper, data_dir, region), both), as_json, title="auto-recovery")
