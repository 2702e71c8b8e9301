"""Usage metering: brokers' reports stored idempotently, aggregated per hour (docs/usage.md)."""
