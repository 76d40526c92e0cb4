"""Pure planning: stack config, catalog, sizing, command lines, labels, versions and cluster rules.

Imports no Pulumi module (tests/unit/test_layers.py asserts it), so `bench/`, `policy/`, the images and the tools
use it without the Pulumi SDK."""
