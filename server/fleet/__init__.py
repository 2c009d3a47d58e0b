"""The fleet capability."""
