"""Provider formats, model adapters and the framework adapters' collector."""
