"""Build: render, BuildKit, verify in the image, record; bake and build-and-push (pipeline); host-side patch
commands.
"""
