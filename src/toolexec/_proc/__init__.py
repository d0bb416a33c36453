"""Child processes: process groups, the reaper and its supervisor."""
