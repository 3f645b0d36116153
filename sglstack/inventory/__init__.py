"""What an image holds: its inventory, listed inside it, compared with the lock, written as an SBOM.

- `model` (pure): the inventory (`Inventory`) and its check against the lock (`lock_problems`);
- `listing`: the stdlib lister run inside an image (`image_inventory`, the engine side);
- `sbom` (pure): the inventory as a CycloneDX 1.6 JSON document, and that document read back.

Below both the image build (its verify lists the image and writes the SBOM beside the build record) and
attest (which signs and attaches what the build recorded, and reads it back in `verify-image`).
"""
