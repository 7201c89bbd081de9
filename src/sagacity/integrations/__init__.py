"""Adapters that turn wrapped tools into each agent framework's own tools (extras)."""
