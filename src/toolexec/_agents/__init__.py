"""Agents: the model protocol, the agent loop and sub-agent tools."""
