"""Partition state, the replica manager, replica fetchers and high-watermark checkpoints.

Below the broker's handlers and above the log; no Django, nothing from data_plane.broker.
"""
