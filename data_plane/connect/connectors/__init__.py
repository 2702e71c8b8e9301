"""The connectors Millrace ships (the only ones hosted tenants may run)."""
