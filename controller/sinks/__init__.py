"""Sinks: after-pass hooks (history, metrics, webhooks); they may never slow or break the loop."""
