"""The lessons' training runs: chapter 2's loop, the four steps, scaling, chapter 3's techniques, chapter 4's optimizers."""
