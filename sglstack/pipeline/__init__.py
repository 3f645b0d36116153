"""Build, then release: `invoke build [--push]`, above both image build and publish (neither knows the other)."""
