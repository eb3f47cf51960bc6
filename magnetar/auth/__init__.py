"""Authentication and authorization: who a client is (providers, TLS, tokens) and what its role may do
(:mod:`magnetar.auth.authorization`, a pure decision over the grants stored in the configuration store)."""
