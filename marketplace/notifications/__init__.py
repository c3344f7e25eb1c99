"""Lifecycle e-mails made from the change-event outbox (docs/notifications.md)."""
