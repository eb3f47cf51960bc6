"""Magnetar's test kit: real servers on free ports, isolated per test, killed afterwards, with faults."""
