"""The Kafka protocol listener (DESIGN §10): Kafka clients produce to and consume from Magnetar topics.

Rooms: ``codec`` (pure: headers, framing, error codes), ``connection`` (the one owner of a socket),
``server`` (listeners and dispatch), ``handlers/`` (one module per API family), ``names`` (topic mapping,
pure), ``records`` (Kafka record batches ⇄ Pulsar entries, pure), ``groups/`` (consumer groups).
"""
