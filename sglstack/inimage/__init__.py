"""In-image code: the standard library only; copied into build stages and images as tools/."""
