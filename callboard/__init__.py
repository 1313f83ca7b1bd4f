"""The `callboard` command line (see callboard.cli) and its API client."""
