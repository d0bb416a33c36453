"""``toolexec ui``: a live page over a journal, with approvals answered in the browser."""
