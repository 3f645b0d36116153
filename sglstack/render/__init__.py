"""Pure rendering: Dockerfile and build context, Compose, Kubernetes (LWS), the config hash (hadolint over the
matrix is `scripts/lint_dockerfiles.py`: render runs no outside tool).
"""
