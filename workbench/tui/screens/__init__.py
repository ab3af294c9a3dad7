"""Modal screens: help and go-to-step."""
