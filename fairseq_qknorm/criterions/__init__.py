"""Criterions of the plugin (registered with fairseq's criterion registry on import)."""
