"""The store, the state table, the submit/cancel service, the supervisor, approvals."""
