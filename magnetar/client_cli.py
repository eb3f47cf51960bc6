"""``magnetar produce`` and ``magnetar consume``: send and receive messages with the official pulsar-client,
as ``pulsar-client produce|consume`` does, printing what went and came.

SERVICE_URL is ``pulsar://host:port`` (binary lookup) or ``http://host:port`` (HTTP lookup); both work
against any broker of a region. Through a region's proxy (or a broker's TLS port) it is ``pulsar+ssl://host:port``
with ``--tls-trust-certs-file`` (the server certificate is verified, host name included) and, where
authentication is on, ``--auth-token`` (or ``$MAGNETAR_AUTH_TOKEN``, which keeps it off the command line).
pulsar-client is imported only when these commands run.
"""

from __future__ import annotations

import time
from typing import Optional

import typer

_TYPES = ("exclusive", "shared", "failover", "key_shared")


_TRUST_HELP = "pulsar+ssl://: the CA certificate (PEM) the server's certificate chains to; its host name is checked."
_TOKEN_HELP = "A token (JWT) to authenticate with (pulsar-client's AuthenticationToken)."


def _client(service_url: str, timeout_s: float, *, tls_trust_certs_file: str = "", auth_token: str = ""):
    import pulsar

    try:
        logger = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    except AttributeError:  # older pulsar-client: its default logger
        logger = None
    tls = {"tls_trust_certs_file_path": tls_trust_certs_file, "tls_validate_hostname": True} \
        if tls_trust_certs_file else {}
    return pulsar.Client(service_url, operation_timeout_seconds=max(1, int(timeout_s)), logger=logger,
                         authentication=pulsar.AuthenticationToken(auth_token.strip()) if auth_token else None,
                         **tls)


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=1)


def produce(
    service_url: str = typer.Argument(..., help="pulsar://host:port or http://host:port of any broker."),
    topic: str = typer.Argument(..., help="Topic, e.g. my-topic or persistent://public/default/my-topic."),
    messages: list[str] = typer.Option(["hello"], "-m", "--message", help="Message text (repeatable)."),
    count: int = typer.Option(1, "-n", "--num-produce", min=1, help="How many times to send each message."),
    key: Optional[str] = typer.Option(None, "-k", "--key", help="Partition/ordering key of every message."),
    timeout_s: float = typer.Option(30.0, "--timeout", min=1, help="Seconds to connect and to send each message."),
    tls_trust_certs_file: str = typer.Option("", "--tls-trust-certs-file", envvar="MAGNETAR_TLS_TRUST_CERTS_FILE",
                                             help=_TRUST_HELP),
    auth_token: str = typer.Option("", "--auth-token", envvar="MAGNETAR_AUTH_TOKEN", help=_TOKEN_HELP),
) -> None:
    """Send messages to a topic; prints each message id."""
    import pulsar

    client = _client(service_url, timeout_s, tls_trust_certs_file=tls_trust_certs_file, auth_token=auth_token)
    try:
        try:
            producer = client.create_producer(topic, send_timeout_millis=int(timeout_s * 1000))
        except pulsar.PulsarException as e:
            _fail(f"cannot create a producer on {topic} via {service_url}: {e}")
        sent = 0
        for _ in range(count):
            for text in messages:
                try:
                    msg_id = producer.send(text.encode(), partition_key=key) if key else producer.send(text.encode())
                except pulsar.PulsarException as e:
                    _fail(f"send failed after {sent} message(s): {e}")
                sent += 1
                typer.echo(f"sent {text!r} as {msg_id}")
        producer.close()
        typer.echo(f"{sent} message(s) sent to {topic}")
    finally:
        client.close()


def consume(
    service_url: str = typer.Argument(..., help="pulsar://host:port or http://host:port of any broker."),
    topic: str = typer.Argument(..., help="Topic to subscribe to."),
    subscription: str = typer.Option(..., "-s", "--subscription-name", help="Subscription name."),
    count: int = typer.Option(1, "-n", "--num-messages", min=0, help="Messages to receive (0: until --timeout)."),
    subscription_type: str = typer.Option("exclusive", "-t", "--subscription-type",
                                          help=f"One of {', '.join(_TYPES)}."),
    position: str = typer.Option("earliest", "-p", "--subscription-position",
                                 help="Where a new subscription starts: earliest or latest."),
    timeout_s: float = typer.Option(30.0, "--timeout", min=0.1, help="Give up after this many seconds."),
    tls_trust_certs_file: str = typer.Option("", "--tls-trust-certs-file", envvar="MAGNETAR_TLS_TRUST_CERTS_FILE",
                                             help=_TRUST_HELP),
    auth_token: str = typer.Option("", "--auth-token", envvar="MAGNETAR_AUTH_TOKEN", help=_TOKEN_HELP),
) -> None:
    """Receive (and acknowledge) messages; prints each one. Exits 1 if fewer than N arrived in time."""
    import pulsar

    kind = subscription_type.lower()
    if kind not in _TYPES:
        _fail(f"--subscription-type must be one of {', '.join(_TYPES)}, got {subscription_type!r}")
    if position.lower() not in ("earliest", "latest"):
        _fail(f"--subscription-position must be earliest or latest, got {position!r}")
    consumer_type = {"exclusive": pulsar.ConsumerType.Exclusive, "shared": pulsar.ConsumerType.Shared,
                     "failover": pulsar.ConsumerType.Failover, "key_shared": pulsar.ConsumerType.KeyShared}[kind]
    initial = pulsar.InitialPosition.Earliest if position.lower() == "earliest" else pulsar.InitialPosition.Latest
    client = _client(service_url, timeout_s, tls_trust_certs_file=tls_trust_certs_file, auth_token=auth_token)
    received = 0
    try:
        try:
            consumer = client.subscribe(topic, subscription, consumer_type=consumer_type, initial_position=initial)
        except pulsar.PulsarException as e:
            _fail(f"cannot subscribe to {topic} via {service_url}: {e}")
        deadline = time.monotonic() + timeout_s
        while count == 0 or received < count:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                break
            try:
                msg = consumer.receive(timeout_millis=remaining_ms)
            except pulsar.Timeout:
                break
            except pulsar.PulsarException as e:
                _fail(f"receive failed after {received} message(s): {e}")
            received += 1
            key = f" key={msg.partition_key()!r}" if msg.partition_key() else ""
            typer.echo(f"received {msg.data().decode(errors='replace')!r} id={msg.message_id()}{key}")
            consumer.acknowledge(msg)
        consumer.close()
    finally:
        client.close()
    typer.echo(f"{received} message(s) received from {topic}")
    if count and received < count:
        raise typer.Exit(code=1)
