"""The broker: topics, producers, subscriptions, the binary-protocol server, lookup and admin."""
