"""Packaged model weights and the text encoder."""
