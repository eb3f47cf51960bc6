"""Prometheus for a Magnetar deployment: its scrape configuration (``config.py``) and alert rules (``rules/*.yml``).

``scrape_config(targets, ...)`` makes the configuration of a Prometheus that scrapes every process of a
deployment, one job per process kind with a ``cluster`` label per region, and evaluates the rules of
``rules/``; ``render(config)`` writes it as the file ``--config.file`` names. ``clusters`` (``magnetar up``)
builds the targets from a topology.
"""

from .config import GLOBAL_CLUSTER, JOBS, ScrapeTarget, TlsClientFiles, render, rules_glob, scrape_config

__all__ = ["GLOBAL_CLUSTER", "JOBS", "ScrapeTarget", "TlsClientFiles", "render", "rules_glob", "scrape_config"]
