"""Input: stacks.yaml to validated, immutable Stack objects, and the image-reference grammar. Knows nothing
downstream.
"""
