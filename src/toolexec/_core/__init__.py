"""The core: values, errors, plans, limits, the call lifecycle, batches and the executor."""
