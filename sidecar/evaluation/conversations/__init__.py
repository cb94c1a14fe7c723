"""``sidecar eval-conversations``: what the write path keeps, asked end to end."""
