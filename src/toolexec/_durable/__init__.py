"""Durable execution: journal stores and the tools around them (docs/durable.md)."""
