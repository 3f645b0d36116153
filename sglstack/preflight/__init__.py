"""Preflight, the host side: is this GPU node fit for the expensive run? ("is it the node or the code?")

- `gate`: the stack's requirements, the checks run here or in the stack's image; `require_ready` for smoke and
  deploy.
- `remote`: the node side copied into the stack's image and run there with every GPU (docker).
- `report`: the table.

The node side (checks, parsers, probes, the all-reduce worker, `python3 -m sglstack.preflight`) is in-image
code, `sglstack.inimage.preflight`: the standard library and torch only, so it runs in any stack image.
"""
