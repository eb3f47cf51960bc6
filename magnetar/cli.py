"""The ``magnetar`` command: one entry point for every process kind and for operators.

Sub-commands import their room lazily, so ``magnetar --help`` stays fast and a room's dependencies load
only when that room runs.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Optional

import typer

from magnetar.errors import MagnetarError

app = typer.Typer(
    name="magnetar",
    help="Magnetar: geo-replicated publish/subscribe on Apache Pulsar's architecture.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _fail(err: Exception) -> None:
    typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


@app.command()
def zookeeper(
    port: int = typer.Option(2181, help="Client port."),
    data_dir: pathlib.Path = typer.Option(..., "--data-dir", help="Snapshots, transaction log and zoo.cfg."),
    host: str = typer.Option("127.0.0.1", help="Address to bind."),
    tick_time_ms: int = typer.Option(500, help="ZooKeeper tick (session timeouts are 2..20 ticks)."),
    heap_mb: int = typer.Option(256, help="JVM heap size."),
    metrics_port: Optional[int] = typer.Option(
        None, "--metrics-port", help="Serve ZooKeeper's numbers (mntr) at http://HOST:PORT/metrics beside the server."),
) -> None:
    """Run a real standalone ZooKeeper server (Debian's package jars, or ZOOKEEPER_HOME)."""
    from magnetar import zookeeper as zk

    settings = zk.ZooKeeperSettings(data_dir=data_dir, port=port, host=host, tick_time_ms=tick_time_ms, heap_mb=heap_mb)
    try:
        if metrics_port is None:
            zk.run_foreground(settings)
            return
        from observability.zookeeper import serve_zookeeper_metrics

        code = zk.run_beside(settings, lambda: serve_zookeeper_metrics(zk_host=host, zk_port=port, host=host,
                                                                       port=metrics_port))
    except MagnetarError as err:
        _fail(err)
    except OSError as err:  # the metrics port is taken
        _fail(MagnetarError(f"cannot serve /metrics on {host}:{metrics_port}: {err.strerror or err}"))
    raise typer.Exit(code=code)


@app.command()
def bookie(config: pathlib.Path = typer.Option(..., "--config", help="bookie.toml")) -> None:
    """Run a storage node (journal, entry logs, index, gRPC BookieService, /metrics)."""
    from bookie.server import run

    try:
        run(config)
    except MagnetarError as err:
        _fail(err)


@app.command()
def autorecovery(config: pathlib.Path = typer.Option(..., "--config", help="autorecovery.toml")) -> None:
    """Run a region's auto-recovery (auditor candidate, replication worker, scrubber, /metrics)."""
    from bookie.autorecovery.process import run

    try:
        run(config)
    except MagnetarError as err:
        _fail(err)


@app.command()
def broker(config: pathlib.Path = typer.Option(..., "--config", help="broker.toml")) -> None:
    """Run a broker (Pulsar binary protocol, admin REST and lookup, /metrics)."""
    from broker.process import run

    try:
        run(config)
    except MagnetarError as err:
        _fail(err)


@app.command()
def proxy(config: pathlib.Path = typer.Option(..., "--config", help="proxy.toml")) -> None:
    """Run a region's gateway proxy (pulsar+ssl:// lookups and forwarding to brokers, admin REST, /metrics)."""
    from proxy.process import run

    try:
        run(config)
    except MagnetarError as err:
        _fail(err)


@app.command()
def up(
    topology: pathlib.Path = typer.Argument(..., help="Topology file, e.g. clusters/standalone.toml."),
    data_dir: pathlib.Path = typer.Option(..., "--data-dir", help="Where every process keeps its data and logs."),
    detach: bool = typer.Option(False, "--detach", help="Return once everything is healthy; leave it running."),
    netns: bool = typer.Option(
        False, "--netns", help="Run each region in its own network namespace, the regions latency_ms apart (the "
        "topology's network table; default 40 ± 5 ms), whatever mode that table says. Needs root."),
) -> None:
    """Start every process a topology names, wait until healthy, write DATA_DIR/topology.json."""
    from clusters.commands import up as do_up

    try:
        raise typer.Exit(code=do_up(topology, data_dir, detach=detach, netns_mode=netns))
    except MagnetarError as err:
        _fail(err)


@app.command()
def down(data_dir: pathlib.Path = typer.Option(..., "--data-dir")) -> None:
    """Stop every process of the deployment in DATA_DIR (process groups; nothing left listening) and remove its
    network namespaces (a deployment run with --netns)."""
    from clusters.commands import down as do_down

    try:
        raise typer.Exit(code=do_down(data_dir))
    except MagnetarError as err:
        _fail(err)


@app.command()
def status(
    data_dir: pathlib.Path = typer.Option(..., "--data-dir"),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show every process of the deployment in DATA_DIR: alive, dead (with exit code), endpoints."""
    from clusters.commands import status as do_status

    try:
        raise typer.Exit(code=do_status(data_dir, as_json=as_json))
    except MagnetarError as err:
        _fail(err)


@app.command("dev-credentials")
def dev_credentials(
    directory: pathlib.Path = typer.Option(..., "--dir", help="Where they are written (what exists is kept)."),
    hosts: list[str] = typer.Option([], "--host", help="A host name or address the server certificate names "
                                    "(repeatable; localhost and 127.0.0.1 always)."),
) -> None:
    """Make what is missing of a development deployment's CA, server certificate, and client certificates and
    tokens of the roles admin, proxy, replicator and demo-app: what `magnetar up` makes for a topology with
    proxies (docker-compose.yml runs it once for its brokers and proxies)."""
    from clusters.security import ROLES, ensure

    try:
        files, made = ensure(directory, hosts=hosts)
    except (MagnetarError, OSError) as err:
        _fail(err)
    typer.echo(f"{files.directory}: {'made ' + ', '.join(made) if made else 'complete, nothing made'}")
    typer.echo(f"  CA {files.ca_file}; token key {files.token_secret_key_file}; roles {', '.join(ROLES)}")


@app.command()
def demo(
    data_dir: pathlib.Path = typer.Option(pathlib.Path(".magnetar/demo"), "--data-dir"),
    topology: Optional[pathlib.Path] = typer.Option(
        None, help="Topology file (default: clusters/local.toml, two regions; one region runs the single-region jobs)."),
) -> None:
    """Bring a local deployment up, run the main job against it, show the result, leave it running."""
    from clusters.demo import run as run_demo

    try:
        raise typer.Exit(code=run_demo(data_dir, topology=topology))
    except MagnetarError as err:
        _fail(err)


netns_app = typer.Typer(help="The links between the regions of a deployment run with `magnetar up --netns`: "
                         "show, cut, silence, heal, change the delay.", no_args_is_help=True)


@netns_app.command("show")
def netns_show(
    data_dir: pathlib.Path = typer.Option(..., "--data-dir"),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Each region's namespace and addresses, the delay, the links cut or silenced now and the relay's counters."""
    import json

    from clusters.network import show

    try:
        shown = show(data_dir)
    except MagnetarError as err:
        _fail(err)
    if as_json:
        typer.echo(json.dumps(shown, indent=2))
        return
    relay = shown["relay"]
    typer.echo(f"{shown['prefix']}: regions {shown['latency_ms']:g} ± {shown['jitter_ms']:g} ms apart; relay "
               + ("not answering" if relay is None else
                  f"{relay['delay_ms']:g} ± {relay['jitter_ms']:g} ms now, {relay['connections']} connections, "
                  f"{relay['refused']} refused; cut: {', '.join(' <-> '.join(p) for p in relay['cut']) or 'none'}; "
                  f"silenced: {', '.join(' <-> '.join(p) for p in relay.get('silenced', [])) or 'none'}"))
    for name, region in shown["regions"].items():
        present = "present" if region["namespace"] in shown["namespaces_present"] else "absent"
        typer.echo(f"  {name}: namespace {region['namespace']} ({present}), public {region['public_address']}, "
                   f"direct {region['direct_address']}")


def _link(action: str, a: str, b: str, data_dir: pathlib.Path) -> None:
    from clusters.network import link

    try:
        typer.echo(link(data_dir, action, a, b))
    except MagnetarError as err:
        _fail(err)


@netns_app.command("cut")
def netns_cut(a: str = typer.Argument(..., help="A region."), b: str = typer.Argument(..., help="Another region."),
              data_dir: pathlib.Path = typer.Option(..., "--data-dir")) -> None:
    """Cut the link between two regions: their connections are reset, new ones refused until `heal`."""
    _link("cut", a, b, data_dir)


@netns_app.command("silence")
def netns_silence(a: str = typer.Argument(..., help="A region."),
                  b: str = typer.Argument(..., help="Another region."),
                  data_dir: pathlib.Path = typer.Option(..., "--data-dir")) -> None:
    """Partition two regions silently: nothing passes either way, nothing is closed, until `heal`."""
    _link("silence", a, b, data_dir)


@netns_app.command("heal")
def netns_heal(a: str = typer.Argument(..., help="A region."), b: str = typer.Argument(..., help="Another region."),
               data_dir: pathlib.Path = typer.Option(..., "--data-dir")) -> None:
    """Heal the link between two regions after a cut or a silence (their clients reconnect by themselves)."""
    _link("heal", a, b, data_dir)


@netns_app.command("delay")
def netns_delay(latency_ms: float = typer.Argument(..., help="One way, between any two regions."),
                jitter_ms: float = typer.Argument(0.0, help="Each chunk is delayed latency_ms ± jitter_ms."),
                data_dir: pathlib.Path = typer.Option(..., "--data-dir")) -> None:
    """Change the delay between regions from now on (the next `up` takes the topology's again)."""
    from clusters.network import set_delay

    try:
        typer.echo(set_delay(data_dir, latency_ms, jitter_ms))
    except MagnetarError as err:
        _fail(err)


app.add_typer(netns_app, name="netns")

from magnetar.admin_cli import admin_app  # noqa: E402  (sub-command registration)
from magnetar.audit_cli import audit  # noqa: E402
from magnetar.auth.certs_cli import certs_app  # noqa: E402
from magnetar.auth.tokens_cli import tokens_app  # noqa: E402
from magnetar.client_cli import consume, produce  # noqa: E402
from magnetar.dashboards_cli import dashboards_app  # noqa: E402
from magnetar.perf import perf_app  # noqa: E402

app.add_typer(admin_app, name="admin")
app.command()(produce)
app.command()(consume)
app.command()(audit)
app.add_typer(perf_app, name="perf")
app.add_typer(tokens_app, name="tokens")
app.add_typer(certs_app, name="certs")
app.add_typer(dashboards_app, name="dashboards")


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
