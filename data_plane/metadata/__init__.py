"""What brokers know about the cluster: immutable metadata snapshots and principals (no Django)."""
