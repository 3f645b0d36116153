"""Build: render, BuildKit, verify in the image, record; bake. Build and push, where Build meets Publish, is
`sglstack.pipeline`'s, a part above both: Build knows no registry.
"""
