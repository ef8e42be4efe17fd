"""Where models and data come from: offline builds first, real checkpoints and datasets when reachable."""
