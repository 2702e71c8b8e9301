"""Consumer groups: the coordinator's state machine and the consumer protocol's bytes.

No Django here: the coordinator persists through the broker's metadata port.
"""
