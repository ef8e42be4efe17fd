"""Measuring: matrix-product speed, metrics, bytes saved for backward, communication, optimizer state."""
