"""Data utilities of the plugin: padding-aware batching (:mod:`.batching`)."""
