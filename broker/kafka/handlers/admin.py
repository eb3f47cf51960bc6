"""CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs."""

HANDLERS: dict = {}
