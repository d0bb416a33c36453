"""The JSON-lines supervisor/runner protocol for agents in other processes."""
