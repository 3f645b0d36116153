"""Pure rendering: Dockerfile and build context, Compose, Kubernetes (LWS), the config hash, hadolint over the
matrix.
"""
