"""callboard as an A2A agent (calling in): its card, runs as tasks, and the routes that serve
them (`mount.install`); also each specialist's contract exported as an Agent Card."""
