"""Containers and the images they run: the runtime seam (base), Docker behind it, images without a registry."""
