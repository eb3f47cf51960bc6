"""Authentication (and, in ``authorization``, the authorization decision) as Apache Pulsar does it.

The public face, by module (imported from the modules themselves, so a process that needs only the errors
does not load PyJWT and ``cryptography``):

* ``errors``: ``AuthenticationError`` (with its ``reason`` label) and ``AuthorizationError``.
* ``providers``: ``Credentials``, ``Authenticated``, ``TlsAuthenticationProvider``,
  ``TokenAuthenticationProvider``, ``TokenSettings``, ``AuthenticationService``.
* ``tokens``: JWT keys and tokens (``create_secret_key``, ``create_key_pair``, ``create_token``, ``read_key``,
  ``verify_token``, ``show_token``).
* ``tls``: ``TlsSettings``, ``server_context``, ``client_context``, ``ReloadingServerContext``.
* ``settings``: ``SecuritySettings``, the security keys every server's TOML shares (TLS files and policy,
  authentication, authorization, ``broker_client_*``), checked and turned into the objects above in one place;
  ``BrokerClientSettings``, a server's credentials towards brokers.
* ``certs``: a development CA, server certificates with SANs and client certificates by role.
* ``authorization``: what a role may do, a pure decision over the grants stored in the configuration store.

Nothing here imports another room, asyncio or a socket: providers are pure decisions over the credentials a
connection hands them.
"""
