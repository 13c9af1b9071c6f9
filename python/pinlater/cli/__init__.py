"""The ``pinlater`` command."""
