"""The HTTP service: router API (and, mounted beside it, the notification API)."""
