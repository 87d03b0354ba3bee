"""Rendering: JSON-ready dicts and compact human text for each command's result."""
