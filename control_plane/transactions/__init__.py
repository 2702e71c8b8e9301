"""Transaction coordinators' durable state (Step 13): one row per tenant and transactional
id, written by the brokers' coordinators through ``brokerlink.transactions``."""
