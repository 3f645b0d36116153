"""Move a stack to a new SGLang release in one reviewed step (`invoke releases`, `invoke upgrade`).

- `releases`: which releases are newer than a stack's pin, and what each one requires (pure + one shell).
- `plan`: the new entry derived from the old one and the release's METADATA, and the verdict (pure).
- `report`: the Markdown review report and the JSON document (pure).
- `stacksfile`: the stacks file edited in place, comments and layout kept (ruamel.yaml round trip).
- `argv`, `argv_probe`: the stack's serving argv through the release's own server argument parser.
- `inputs`, `world`, `planning`, `edit`, `command`: the shell that checks the inputs, asks the project's engines
  (`engines`, `locks`), builds the plan, edits the stacks file and writes.
"""
