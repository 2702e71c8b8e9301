"""Alert rules, their evaluation, and delivery by e-mail and signed webhooks (docs/alerts.md)."""
