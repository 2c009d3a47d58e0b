"""The HTTP service: router API (and, mounted beside it, the notification API)."""

SERVICE_VERSION = "1.0.0"
