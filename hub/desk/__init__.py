"""The calling desk: the operator's web console the hub serves at `/` (hub.desk.mount)."""
