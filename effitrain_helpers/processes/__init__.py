"""Running real processes from a notebook: launching N ranks, and what each rank saw."""
