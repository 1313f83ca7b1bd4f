"""The callboard hub: routing, the run engine and the REST API."""
