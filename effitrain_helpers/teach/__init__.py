"""Teaching: exercises and their checks, classroom editions, the course map, plots and widgets."""
