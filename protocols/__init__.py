"""The wire protocol and the cuelist language of callboard: pure code, no I/O (but transport)."""
