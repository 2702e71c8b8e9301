"""Kafka's wire protocol, sans I/O: it performs no I/O and operates only on bytes.

* :mod:`.types` — primitive encodings, classic and compact (flexible versions), tagged fields;
* :mod:`.schema` — declarative message schemas: fields with version ranges, nullable and
  tagged versions; one schema encodes and decodes every version of a message;
* :mod:`.headers` — request header v0-v2 and response header v0-v1, and which applies;
* :mod:`.framing` — the 4-byte size prefix, with a cap checked before any allocation;
* :mod:`.errors` — Kafka's error codes;
* :mod:`.messages` — one module per API with its request and response schemas;
* :mod:`.bodies` — a TypedDict per request and response body, generated from the schemas
  (``python -m data_plane.protocol.typegen``) so that mypy checks handlers' field access.

Schemas were written by hand from Kafka's public protocol guide and message specs.
"""
