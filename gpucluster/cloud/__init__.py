"""Checks against a cloud's API before ``pulumi up``: what Pulumi cannot know until it fails."""
