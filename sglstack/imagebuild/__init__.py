"""Build: render, BuildKit, verify in the image, record; bake; host-side patch commands. Build and push,
where Build meets Publish, is the face's (`sglstack.cli.pipeline`): Build knows no registry.
"""
