"""The studies panel."""
