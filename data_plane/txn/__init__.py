"""Transactions (Step 13): the transaction coordinator's state and state machine."""
