"""The link between regions, for tests: the product's relay (``clusters.wan_relay``), re-exported."""

from clusters.wan_relay import Relay, region_of, send_command

__all__ = ["Relay", "region_of", "send_command"]
