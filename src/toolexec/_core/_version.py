"""The version of the package, in one place (``toolexec.__version__``)."""

VERSION = "0.1.0"
