"""The ``toolexec`` command line."""
