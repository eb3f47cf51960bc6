"""Names of the broker process's own metrics (ownership, lookups, admin REST).

Topic, subscription and namespace series use Apache Pulsar's names (``pulsar_*``) and are defined by the
service; what Pulsar has no name for is ``magnetar_broker_*`` (DESIGN §8).
"""

OWNED_BUNDLES = "magnetar_broker_owned_bundles"
BUNDLES_ACQUIRED = "magnetar_broker_bundles_acquired"  # counter (_total added by prometheus-client)
BUNDLES_RELEASED = "magnetar_broker_bundles_released"  # counter, label reason
LOOKUPS = "magnetar_broker_lookups"  # counter, label answer: connect | redirect | error
HTTP_REQUESTS = "magnetar_broker_http_requests"  # counter, labels method, route, status
HTTP_REQUEST_SECONDS = "magnetar_broker_http_request_seconds"  # histogram, label route
AUTH_FAILURES = "magnetar_broker_auth_failures"  # counter, label reason (magnetar.auth.errors.REASONS)
AUTHORIZATION_DENIALS = "magnetar_broker_authorization_denials"  # counter, label action: produce | consume | ...
KAFKA_CONNECTIONS = "magnetar_broker_kafka_connections"  # gauge: open Kafka client connections
KAFKA_REQUESTS = "magnetar_broker_kafka_requests"  # counter, label api (ApiVersions, Produce, ...)
KAFKA_REFUSED = "magnetar_broker_kafka_refused_requests"  # counter: frames that closed their connection
