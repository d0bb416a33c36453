"""Where a call runs besides the host: the subprocess sandbox, remote workers, Ray."""
