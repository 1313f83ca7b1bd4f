"""The run engine: cuelists turned into coordinated work."""
