"""Tools that run inside build stages and built images: stdlib only, copied into the build context."""
