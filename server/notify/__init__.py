"""Notifications: fixed texts per type, email delivery, retries of failed deliveries."""
